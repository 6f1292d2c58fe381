"""The engine's seams: the model spec and the one setup recipe (experiments/training/), the one memory tracker and its
listeners (experiments/measure/tracker.py), the estimate's explanation read off the replay (experiments/estimate/)."""

from __future__ import annotations

import contextlib

import pytest
import torch

from experiments.core.config import ExperimentConfig
from experiments.core.units import MIB
from experiments.estimate.estimator import estimate
from experiments.measure.phases import PhaseRecorder
from experiments.measure.tracker import MemoryTracker
from experiments.training.models import ModelSpec, spec_for
from experiments.training.step import Setup, TrainState, setup, train_step

CPU = torch.device("cpu")


@pytest.mark.parametrize(
    ("model", "inputs", "target"),
    [
        ("mlp", (16, 32), ((16, 32), torch.float32)),
        ("cnn", (16, 3, 8, 8), ((16,), torch.int64)),
        ("transformer", (16, 4, 32), ((16, 4, 32), torch.float32)),
    ],
)
def test_each_family_is_a_spec_with_named_inputs_and_targets(model, inputs, target):
    cfg = ExperimentConfig(model=model, layers=2, width=32, heads=4, seq_len=4, image_size=8, batch=16)
    spec = spec_for(cfg)
    assert isinstance(spec, ModelSpec)
    x, y = spec.batch(cfg, CPU, 1)
    assert {k: tuple(v.shape) for k, v in x.items()} == {"x": inputs}
    assert {k: (tuple(v.shape), v.dtype) for k, v in y.items()} == {"y": target}
    again = spec.batch(cfg, CPU, 1)  # its own generator: the same seed, the same numbers
    assert torch.equal(again[0]["x"], x["x"]) and torch.equal(again[1]["y"], y["y"])
    module = spec.build(cfg, CPU)
    assert module.checkpoint_mode == "none" and len(spec.blocks(module)) == 2
    spec.enable_checkpointing(module, cfg.replace(checkpoint="segments", segments=2))
    assert (module.checkpoint_mode, module.segment_size) == ("segments", 2)
    loss = spec.loss(cfg, module, x, y)
    assert loss.dim() == 0 and loss.requires_grad


def test_micro_batches_are_views_of_the_whole_batch():
    cfg = ExperimentConfig(layers=1, width=16, batch=8, accum=4, device="cpu")
    state = setup(TrainState(cfg, CPU))
    whole = state.inputs["x"].untyped_storage().data_ptr(), state.targets["y"].untyped_storage().data_ptr()
    seen = []
    loss = state.spec.loss

    class Spy(type(state.spec)):
        def loss(self, cfg, model, inputs, targets):
            seen.append(
                (
                    inputs["x"].shape[0],
                    inputs["x"].untyped_storage().data_ptr(),
                    targets["y"].untyped_storage().data_ptr(),
                )
            )
            return loss(cfg, model, inputs, targets)

    state.spec = Spy()
    train_step(state)
    assert seen == [(2, *whole)] * 4


def test_the_setup_recipe_runs_each_part_in_its_phase_and_tells_the_tracker_the_parameters():
    cfg = ExperimentConfig(layers=2, width=16, batch=4, device="cpu")
    told = []

    class Listener:
        def parameters(self, tracker, params, wrapped):
            told.append((len(params), wrapped, tracker.param_keys == {p.untyped_storage()._cdata for p in params}))

    tracker = MemoryTracker(listeners=[Listener()])
    rec = PhaseRecorder(CPU, tracker)
    wrapped = []
    how = Setup(wrap=lambda model: wrapped.append(model) or model, scaler=lambda s: s)
    with tracker:
        state = setup(TrainState(cfg, CPU), rec, tracker, how)
    assert [p["phase"] for p in rec.phases] == ["model", "wrap", "optimizer", "data"]
    assert wrapped == [state.model] and told == [(4, False, True), (4, True, True)]
    params = 2 * (16 * 16 + 16) * 4
    assert [p["allocated_bytes"] for p in rec.phases] == [params, params, params, params + 2 * 4 * 16 * 4]


class Log:
    def __init__(self):
        self.events = []

    def allocated(self, tracker, key, rec, t, requested):
        self.events.append(("+", rec.nbytes, requested, rec.tag))

    def freed(self, tracker, key, rec):
        self.events.append(("-", rec.nbytes))

    def held(self, tracker, items):
        self.events.append(("scratch", *(nbytes for _, nbytes in items)))

    def phase_started(self, tracker, name, step, micro):
        self.events.append(("phase", name))


def test_one_tracker_tells_its_listeners_what_it_counts():
    log = Log()
    tracker = MemoryTracker(block=512, listeners=[log])
    with tracker:
        tracker.phase_started("forward", 1, None)
        tracker.begin_phase("_forward")
        a = torch.empty(100)  # 400 bytes asked, one 512-byte block counted
        b = torch.empty(1000)
        del a
        tracker.hold_scratch(3000)
        peak_one = tracker.peak
        tracker.hold_scratch(2000, 0, 1500)  # held together: both in the peak at once (a zero is no buffer)
    assert log.events == [
        ("phase", "forward"),
        ("+", 512, 400, "_forward"),
        ("+", 4096, 4000, "_forward"),
        ("-", 512),
        ("scratch", 3000),
        ("scratch", 2000, 1500),
    ]
    # The scratch buffer is in the peak, never in what is live or in a category.
    assert (tracker.current, peak_one) == (4096, 4096 + 3072)
    assert tracker.peak == 4096 + 2048 + 1536  # together: their sum, each rounded to the block
    assert tracker.by_category()["temporaries"] == 4096 and sum(tracker.peak_by_category().values()) == 4096
    del b


def test_a_watched_storage_resized_in_place_is_re_read_at_the_next_op():
    sizes = []

    class Resized:
        def resized(self, tracker, key, old, new):
            sizes.append((old, new))

    tracker = MemoryTracker(listeners=[Resized()])
    with tracker:
        t = torch.empty(256)
        tracker.watch_storage(t)
        t.untyped_storage().resize_(0)  # what FSDP2 does to an unsharded parameter: no dispatch mode sees it
        kept = torch.empty(1)
    assert sizes == [(1024, 0)] and tracker.current == 4 and tracker.peak == 1024
    del kept


def test_host_memory_and_phases_that_run_off_the_device_are_counted_apart():
    tracker = MemoryTracker(host_apart=True, off_device_tags={"_optimizer_step"}, local=lambda t: t)
    with tracker:
        on_host = torch.empty(10)  # a CPU storage on a rank whose device is not the CPU
        tracker.begin_phase("_optimizer_step")
        ignored = torch.empty(1000)
        tracker.begin_phase("_forward")
    assert (tracker.current, tracker.host_current, tracker.host_peak) == (0, 40, 40)
    del on_host, ignored
    assert tracker.host_current == 0
    moved = MemoryTracker()
    with moved:
        shard = torch.empty(64)
    moved.move_to_host(shard)
    assert (moved.current, moved.host_current, moved.peak) == (0, 256, 256)


def test_the_explanation_is_read_off_the_replay():
    cfg = ExperimentConfig(
        layers=3,
        width=64,
        batch=16,
        accum=2,
        optimizer="adam",
        optimizer_impl="foreach",
        checkpoint="segments",
        device="cpu",
    )
    est = estimate(cfg, device_type="cpu")
    terms = {t["category"]: t for t in est["terms"]}
    assert list(terms) == list(est["categories"]) and all(terms[c]["bytes"] == v for c, v in est["categories"].items())
    params = 3 * (64 * 64 + 64) * 4
    assert terms["parameters"]["args"] == {"mib": params / MIB, "dtype": "fp32"}
    # Adam's two moments and one 4-byte step counter per parameter tensor.
    assert terms["optimizer_state"]["args"] == {"optimizer": "adam", "mib": (2 * params + 6 * 4) / MIB}
    assert terms["activations"]["args"] == {"micro_batch": 8, "checkpointed": True}
    # foreach Adam's step holds sqrt(v) of every tensor at once (the denominators are made from it in place).
    assert terms["temporaries"]["args"] == {"impl": "foreach", "mib": params / MIB}
    cuda = estimate(cfg.replace(precision="bf16", optimizer_impl="default"), device_type="cuda")
    terms = {t["category"]: t for t in cuda["terms"]}
    assert terms["other"]["bytes"] == cuda["categories"]["other"] and terms["parameters"]["args"]["dtype"] == "bf16"
    assert terms["temporaries"]["args"]["impl"] == "default"  # as the learner chose it (CUDA runs foreach)


def test_the_recorder_tells_the_tracker_each_phase_in_order():
    log = Log()
    tracker = MemoryTracker(listeners=[log])
    rec = PhaseRecorder(CPU, tracker)
    with tracker, rec("zero_grad", 1), contextlib.suppress(ZeroDivisionError):
        pass
    assert log.events == [("phase", "zero_grad")] and rec.phases[0]["phase"] == "zero_grad"
