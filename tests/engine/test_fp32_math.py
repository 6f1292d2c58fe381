"""fp32 means what a learner's own script gets with PyTorch's defaults; strict fp32 and TF32 are choices on top."""

import json
import subprocess
import sys
import threading
import time

import pytest
import torch

from experiments.core.config import ConfigError, ExperimentConfig
from experiments.training import fp32_math
from experiments.training.fp32_math import DEFAULT_TREE, fp32_mode
from experiments.training.strategies import float32_precision

NEW_API = hasattr(torch._C, "_get_fp32_precision_getter")

# Every switch that decides how an fp32 matmul or convolution computes, read through torch's own getters. The
# legacy getters refuse to read states that mix the legacy and the new API: that refusal is part of the state.
OBSERVE = """
import json, torch
out = {}
for name, get in (("matmul_precision", torch.get_float32_matmul_precision),
                  ("cudnn.allow_tf32", lambda: torch.backends.cudnn.allow_tf32),
                  ("cuda.matmul.allow_tf32", lambda: torch.backends.cuda.matmul.allow_tf32)):
    try:
        out[name] = get()
    except RuntimeError:
        out[name] = "unreadable"
if hasattr(torch._C, "_get_fp32_precision_getter"):
    for backend, op in NODES:
        out[backend + "." + op] = torch._C._get_fp32_precision_getter(backend, op)
"""
NODES = [node for node, _ in DEFAULT_TREE]


def observe() -> dict:
    scope = {"NODES": NODES}
    exec(OBSERVE, scope)
    return scope["out"]


def fresh_interpreter_defaults() -> dict:
    """What a script that sets nothing has: read in a new interpreter, not from this module's table."""
    code = f"NODES = {NODES!r}\n{OBSERVE}\nprint(json.dumps(out))"
    return json.loads(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout)


@pytest.fixture
def leaked_state():
    """A process where earlier code set TF32 everywhere through both APIs (and left the legacy getters unreadable)."""
    saved = fp32_math.snapshot()
    torch.set_float32_matmul_precision("high")
    torch.backends.cudnn.allow_tf32 = False
    if NEW_API:
        torch.backends.fp32_precision = "tf32"
        torch.backends.cudnn.conv.fp32_precision = "ieee"
    yield observe()
    fp32_math.restore(saved)


def test_fp32_sets_exactly_what_a_fresh_interpreter_has(leaked_state):
    defaults = fresh_interpreter_defaults()
    assert defaults["matmul_precision"] == "highest" and defaults["cudnn.allow_tf32"] is True
    assert leaked_state != defaults
    with fp32_mode("fp32"):
        assert observe() == defaults
    for precision in ("fp32", "amp_bf16", "amp_fp16", "bf16"):  # what autocast leaves in fp32 keeps the defaults
        with float32_precision(ExperimentConfig(precision=precision)):
            assert observe() == defaults, precision


def test_strict_fp32_turns_tf32_off_for_convolutions_even_under_a_parent_set_to_tf32(leaked_state):
    with float32_precision(ExperimentConfig(precision="fp32_strict")):
        state = observe()
        assert state["matmul_precision"] == "highest" and state["cudnn.allow_tf32"] is False
        assert not fp32_math.convolutions_use_tf32()
        if NEW_API:
            assert state["cuda.conv"] != "tf32" and state["cuda.matmul"] != "tf32" and state["generic.all"] == "none"


def test_tf32_lets_matmuls_and_convolutions_use_it():
    with float32_precision(ExperimentConfig(precision="tf32")):
        state = observe()
        assert state["matmul_precision"] == "high" and state["cuda.matmul.allow_tf32"] is True
        assert state["cudnn.allow_tf32"] is True and fp32_math.convolutions_use_tf32()


@pytest.mark.parametrize("mode", fp32_math.MODES)
def test_every_mode_gives_back_the_state_it_found_also_after_an_error(leaked_state, mode):
    with pytest.raises(ZeroDivisionError), fp32_mode(mode):
        assert observe() != leaked_state
        _ = 1 / 0
    assert observe() == leaked_state
    with fp32_mode(mode):
        pass
    assert observe() == leaked_state


def test_an_unknown_mode_names_the_field_and_the_choices():
    with pytest.raises(ValueError, match="precision: got 'fp64'.*fp32, fp32_strict, tf32"):
        fp32_math.set_mode("fp64")


def test_config_accepts_strict_fp32_and_names_the_field_for_junk():
    assert ExperimentConfig(precision="fp32_strict").precision == "fp32_strict"
    assert ExperimentConfig.field_value("precision", "fp32_strict") == "fp32_strict"
    with pytest.raises(ConfigError, match="fp32_strict") as err:
        ExperimentConfig(precision="fp32-strict")
    assert err.value.field == "precision" and err.value.code == "choice"


def test_the_engine_runs_and_replays_a_step_in_the_mode_its_precision_names(monkeypatch):
    """Read inside a convolution of the real CPU run and of the estimate's fake-tensor replay."""
    from experiments.estimate.estimator import estimate
    from experiments.measure.run import run_experiment
    from experiments.training import models

    seen = []
    forward = models.ConvBlock.forward

    def spy(self, x):
        seen.append(fp32_math.convolutions_use_tf32())
        return forward(self, x)

    monkeypatch.setattr(models.ConvBlock, "forward", spy)
    # Held while the leftover is written and read: a mode block another thread still has open (an estimate of an
    # earlier page test, say) would otherwise give back, over this write, the state it found before it.
    with fp32_math.LOCK:
        saved = fp32_math.snapshot()
        torch.backends.cudnn.allow_tf32 = False  # a leftover the fp32 run must not inherit, and must give back
        try:
            for precision, tf32 in (("fp32", True), ("fp32_strict", False), ("tf32", True)):
                cfg = ExperimentConfig(
                    model="cnn",
                    layers=2,
                    width=8,
                    batch=2,
                    image_size=16,
                    precision=precision,
                    device="cpu",
                    steps=2,
                    timing_steps=0,
                )
                seen.clear()
                run_experiment(cfg)
                estimate(cfg, device_type="cpu")
                assert seen and set(seen) == {tf32}, precision
                assert torch.backends.cudnn.allow_tf32 is False
        finally:
            fp32_math.restore(saved)


def test_mode_blocks_on_two_threads_take_turns_and_each_gives_back_what_it_found():
    """The server computes estimates on several threads (pages, exercise 2's search) and the inline worker runs
    jobs on one more; the switches are process-wide. A block opened while another thread's is open used to set
    its mode under the other's run, and the last one to close gave back the state the other had set."""
    before = observe()
    inside, release_first, release_second = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def first():
        with fp32_mode("fp32_strict"):
            inside.set()
            release_first.wait(30)
            seen["first"] = fp32_math.convolutions_use_tf32()

    def second():
        with fp32_mode("tf32"):
            seen["second"] = fp32_math.convolutions_use_tf32()
            release_second.wait(30)

    a, b = threading.Thread(target=first), threading.Thread(target=second)
    a.start()
    assert inside.wait(30)
    b.start()
    time.sleep(0.5)  # long enough for the second block to open, were it not made to wait
    assert "second" not in seen
    release_first.set()
    a.join(30)
    release_second.set()
    b.join(30)
    assert seen == {"first": False, "second": True}
    assert observe() == before
