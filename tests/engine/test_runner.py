import pytest
import torch

from experiments.core.config import ExperimentConfig
from experiments.measure.run import run_experiment

SMALL = dict(device="cpu", model="mlp", layers=3, width=64, batch=16, timing_steps=2)


def _param_bytes(layers, width, elem=4):
    return layers * (width * width + width) * elem


def test_phase_sequence_with_accumulation():
    r = run_experiment(ExperimentConfig(**SMALL, accum=2, steps=2))
    seq = [(p["step"], p["micro"], p["phase"]) for p in r["phases"]]
    step = [
        ("zero_grad", None),
        ("forward", 0),
        ("backward", 0),
        ("forward", 1),
        ("backward", 1),
        ("optimizer_step", None),
    ]
    expected = [(0, None, "model"), (0, None, "optimizer"), (0, None, "data")]
    for s in (1, 2):
        expected += [(s, m, ph) for ph, m in step]
    assert seq == expected
    assert r["device"]["type"] == "cpu"
    assert all(p["reserved_bytes"] is None for p in r["phases"])  # no reserved memory on CPU, never invented
    assert r["oom"] is None and not r["cancelled"]


def test_parameter_gradient_and_adam_state_bytes_match_a_hand_count():
    cfg = ExperimentConfig(**SMALL, optimizer="adam", zero_grad_to_none=False, steps=2)
    r = run_experiment(cfg)
    P = _param_bytes(3, 64)
    steady = r["breakdown_steady"]
    assert steady["parameters"] == P
    assert steady["gradients"] == P
    # exp_avg + exp_avg_sq per parameter, plus a 4-byte fp32 `step` tensor per parameter on CPU.
    assert steady["optimizer_state"] == 2 * P + 6 * 4
    model_phase = r["phases"][0]
    assert model_phase["phase"] == "model" and model_phase["allocated_bytes"] == P
    data_phase = r["phases"][2]
    assert data_phase["allocated_bytes"] - model_phase["allocated_bytes"] == 2 * 16 * 64 * 4


def test_sgd_has_no_state_and_bf16_halves_the_parameters():
    r = run_experiment(ExperimentConfig(**SMALL, optimizer="sgd", precision="bf16"))
    assert r["breakdown_steady"]["optimizer_state"] == 0
    assert r["breakdown_steady"]["parameters"] == _param_bytes(3, 64, elem=2)


def test_activations_grow_with_batch_and_checkpointing_segments_saves_them():
    base = dict(SMALL, layers=16, width=128, batch=256, optimizer="sgd", timing_steps=0)
    plain = run_experiment(ExperimentConfig(**base))
    seg = run_experiment(ExperimentConfig(**base, checkpoint="segments"))
    per_layer = run_experiment(ExperimentConfig(**base, checkpoint="per_layer"))
    act = 256 * 128 * 4

    def kept_by_forward(r):
        fwd = [p for p in r["phases"] if p["phase"] == "forward"][0]
        return fwd["allocated_bytes"] - r["phases"][2]["allocated_bytes"]  # after the data phase

    # Forward keeps one (batch, width) ReLU output per layer, and mse_loss's full-size storage behind its 0-dim loss.
    assert kept_by_forward(plain) == kept_by_forward(per_layer) == (16 + 1) * act
    # Segments of 4 (about sqrt(16)) keep only what enters the next segment and the model's output: 3 + 1 + 1.
    assert kept_by_forward(seg) == (3 + 1 + 1) * act
    assert plain["peak_bytes"] - seg["peak_bytes"] > 5 * act
    # Checkpointing each Linear+ReLU layer alone saves nothing: its input is what autograd keeps anyway.
    assert per_layer["peak_bytes"] == plain["peak_bytes"]


def test_step_time_and_flops_are_reported():
    r = run_experiment(ExperimentConfig(**dict(SMALL, timing_steps=3)))
    s = r["step_ms"]
    assert len(s["samples"]) == 3 and s["p10"] <= s["median"] <= s["p90"]
    # FlopCounterMode: forward 2*B*W*W per layer, backward twice that, minus the first layer's input grad.
    B, W, L = 16, 64, 3
    assert r["flops_per_step"] == 6 * B * W * W * L - 2 * B * W * W
    # The rates are per median step: the batch and the counted flops over its seconds (TFLOP/s: 1e12 flops).
    seconds = s["median"] / 1e3
    assert r["samples_per_s"] == pytest.approx(B / seconds)
    assert r["tflops"] == pytest.approx((6 * B * W * W * L - 2 * B * W * W) / seconds / 1e12)


def test_out_of_memory_is_a_result_and_frees_everything():
    cfg = ExperimentConfig(**dict(SMALL, width=512, batch=512), budget_mb=4, force=True)
    r = run_experiment(cfg)
    assert r["oom"] is not None
    assert "out of memory" in r["oom"]["message"].lower()
    assert r["oom"]["requested_bytes"] > 0 and f"({r['oom']['requested_bytes']} bytes)" in r["oom"]["message"]
    assert r["oom"]["phase"] in ("model", "optimizer", "data", "forward", "backward", "optimizer_step")
    assert r["allocated_after_bytes"] == r["baseline_bytes"] == 0


def test_a_run_that_would_not_fit_is_refused_before_allocating():
    from experiments.measure.fits import WouldNotFit

    with pytest.raises(WouldNotFit) as info:
        run_experiment(ExperimentConfig(**dict(SMALL, width=4096, batch=4096), budget_mb=8))
    assert "does not fit" in str(info.value)


def test_cancel_stops_between_phases():
    calls = []
    r = run_experiment(
        ExperimentConfig(**SMALL), progress=lambda d, t, label: calls.append(d), should_cancel=lambda: len(calls) >= 4
    )
    assert r["cancelled"] and len(r["phases"]) == 4


def test_cancel_stops_the_timing_steps_too():
    """A Cancel during the un-instrumented timing steps took effect only after all of them (161.8 s seen)."""
    import time

    cfg = ExperimentConfig(**dict(SMALL, timing_steps=200))
    cancel_at = []

    def should_cancel():
        # Cancel once the measured phases are done and timing has begun (the flag stays set from then on).
        if not cancel_at and len(progress) >= cfg.steps * (2 + 2 * cfg.accum) + 3:
            cancel_at.append(time.perf_counter())
        return bool(cancel_at)

    progress = []
    r = run_experiment(cfg, progress=lambda d, t, label: progress.append(label), should_cancel=should_cancel)
    assert r["cancelled"] and r["step_ms"] is None
    assert time.perf_counter() - cancel_at[0] < 5.0


def test_the_timing_steps_report_progress_a_tenth_at_a_time():
    """A run's timing phase was one silent unit (66 s between two lines on a busy CPU): it now reports every tenth of
    its steps, inside that unit (the done count neither moves back nor passes the total)."""
    calls = []
    run_experiment(ExperimentConfig(**dict(SMALL, timing_steps=20)), progress=lambda *c: calls.append(c))
    timing = [label for _, _, label in calls if label.startswith("timing:")]
    assert timing == [f"timing: {i} of 20 steps" for i in range(2, 20, 2)]
    done = [d for d, _, _ in calls]
    assert done == sorted(done) and all(d <= t for d, t, _ in calls)


def test_losses_match_a_plain_pytorch_loop():
    cfg = ExperimentConfig(**dict(SMALL, optimizer="sgd", timing_steps=0, steps=3))
    r = run_experiment(cfg)
    from experiments.training import fp32_math
    from experiments.training.models import build_model, spec_for

    # The global RNG is process-wide: a thread of an earlier test in this process (the inline worker's calibration,
    # an estimate) may seed it between these lines. The engine's seeded sections take fp32_math.LOCK; so does this.
    with fp32_math.LOCK:
        torch.manual_seed(cfg.seed)
        model = build_model(cfg, torch.device("cpu"))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    inputs, targets = spec_for(cfg).batch(cfg, torch.device("cpu"), cfg.seed + 1)
    x, y = inputs["x"], targets["y"]
    losses = []
    for _ in range(3):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert r["losses"] == losses


def test_the_phase_that_runs_out_of_memory_is_recorded_with_the_memory_in_use():
    cfg = ExperimentConfig(device="cpu", layers=4, width=512, batch=4096, budget_mb=12, force=True, timing_steps=0)
    r = run_experiment(cfg)
    failed = [p for p in r["phases"] if p.get("failed")]
    assert len(failed) == 1 and failed[0]["phase"] == r["oom"]["phase"] == "data"
    # Parameters (4 x 512 x 513 fp32) were in use when the 4096 x 512 input could not be allocated.
    assert r["oom"]["in_use_bytes"] == failed[0]["peak_bytes"] == 4 * 512 * 513 * 4
    assert r["oom"]["requested_bytes"] == 4096 * 512 * 4
    assert r["peak_bytes"] >= failed[0]["peak_bytes"]


def _mem_tracker_figures(cfg: ExperimentConfig, out) -> None:
    from torch.distributed._tools.mem_tracker import MemTracker

    from experiments.training.step import build_state, train_step

    state = build_state(cfg, torch.device("cpu"))
    mt = MemTracker()
    mt.track_external(state.model, state.optimizer)
    with mt:
        for _ in range(cfg.steps):
            train_step(state)
            mt.reset_mod_stats()  # or MemTracker raises on the second iteration
    (peak,) = mt.get_tracker_snapshot("peak").values()
    (current,) = mt.get_tracker_snapshot("current").values()
    out.put((peak["Total"], {ref.value: n for ref, n in current.items() if ref != "Total"}))


def test_storage_tracker_agrees_with_pytorchs_mem_tracker():
    """torch.distributed._tools.mem_tracker.MemTracker on the same loop: the same peak, the same parameter,
    gradient and optimizer-state bytes (it files the input batch under activations; we call it data).
    MemTracker follows modules with global hooks, which a model running in another thread of this process (an app
    test's inline job) enters too and can break its bookkeeping (seen once in CI: "The Module hierarchy tracking is
    wrong"; a thread training the same MLP class beside it makes MemTracker raise in that thread): it runs in a
    process of its own."""
    import multiprocessing

    cfg = ExperimentConfig(device="cpu", layers=3, width=256, batch=64, optimizer="adam", timing_steps=0, steps=2)
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    child = ctx.Process(target=_mem_tracker_figures, args=(cfg, out))
    child.start()
    peak, by_name = out.get(timeout=120)
    child.join(timeout=60)
    ours = run_experiment(cfg)
    assert ours["peak_bytes"] == peak
    steady = ours["breakdown_steady"]
    assert steady["parameters"] == by_name["Parameter"]
    assert steady["gradients"] == by_name["Gradient"]
    assert steady["optimizer_state"] == by_name["Optstate"]
