"""What a prediction of a whole run needs beyond the device's rates (experiments/estimate/throughput.py): a run's own
costs (its fixed part, the fit check's replay and the instrumented steps, per kernel) and how far a real training
step of each model family and precision stays from its roofline (`efficiency`: the steps' own kernels, small
matmuls, convolutions, their backward, autocast's casts, reach only a part of a large matmul's rate; on a GPU
experiments/estimate/gpu_efficiency.py measures it). Tens of seconds on a busy CPU: the worker calibrates once,
after its first device report.
"""

from __future__ import annotations

import functools
import time

import torch

from ..core.config import ExperimentConfig
from ..measure.run import run_experiment
from ..training.step import build_state, train_step
from ..training.strategies import float32_precision
from . import gpu_efficiency
from .estimator import estimate
from .replay import replay
from .steptime import RANGE, predict_step_ms
from .throughput import load_now, mean_load, measure, rates_report, sig, timed

# The run-cost probe: two tiny configurations (negligible arithmetic) that differ only in their kernel count.
PROBE = {"width": 16, "batch": 4, "steps": 2, "timing_steps": 2, "optimizer": "adam"}
PROBE_LAYERS = (1, 16)


@functools.lru_cache(maxsize=4)
def calibrate(device_type: str) -> dict:
    """The rates plus what a prediction of a whole run needs: the run's own costs and the training steps'
    efficiency. Tens of seconds on a busy CPU: the worker measures it once, after its first report."""
    rates = measure(device_type)
    out = dict(rates, run=_run_costs(device_type, rates["op_us"]))
    if device_type == "cpu":
        out["efficiency"] = _efficiency(torch.device("cpu"), rates)
    else:
        out["gpu_efficiency"] = gpu_efficiency.cached(torch.device(device_type), rates)
    return out


# Real training steps of a few milliseconds each on an idle CPU core (half precision: its rate is a fraction).
EFFICIENCY_PROBES = {
    "mlp": {"model": "mlp", "layers": 4, "width": 256, "batch": 128},
    "cnn": {"model": "cnn", "layers": 3, "width": 16, "image_size": 32, "batch": 8},
    "transformer": {"model": "transformer", "layers": 1, "width": 64, "heads": 4, "seq_len": 64, "batch": 4},
}
HALF_PROBE = {"model": "mlp", "layers": 2, "width": 128, "batch": 32}


def _efficiency(device: torch.device, rates: dict) -> dict:
    """Measured step time over the roofline prediction (steptime.predict_step_ms's centre) of a real step: per model
    family in fp32, and per half precision relative to fp32 (on the MLP). Measured on a CPU only."""

    def ratio(params: dict, precision: str) -> float:
        cfg = ExperimentConfig(device=device.type, precision=precision, optimizer="adam", **params)
        state = build_state(cfg, device)
        load = load_now()
        with float32_precision(cfg):
            seconds = timed(lambda: train_step(state), device, 1)
        # The roofline at the load of this moment, so that the ratio is the kernels' own.
        center = (
            predict_step_ms(replay(cfg)["step"], rates, precision, device.type, mean_load(load, load_now()))["low_ms"]
            / RANGE[0]
        )
        return seconds * 1e3 / center

    out = {family: sig(ratio(params, "fp32")) for family, params in EFFICIENCY_PROBES.items()}
    base = ratio(HALF_PROBE, "fp32")
    for precision in ("amp_bf16", "amp_fp16", "bf16"):
        out[precision] = sig(ratio(HALF_PROBE, precision) / base)
    return out


def _run_costs(device_type: str, op_us: float) -> dict:
    """What a run costs besides the arithmetic of its steps, from two tiny runs through the engine itself (their
    device report carries the rates, measured before):
    fixed_s per run (device report, fit check, history, gc, the allocator's release), replay_us per kernel of a
    step (the fit check replays setup and two steps on fake tensors) and tracked_us per kernel of an
    instrumented step (the storage tracker, the allocation history, the phase boundaries)."""
    small, large = (ExperimentConfig(layers=n, device=device_type, **PROBE) for n in PROBE_LAYERS)
    run_experiment(small)  # this process's first-call costs (imports, the first dispatch mode) are no run's
    load = load_now()
    points = []
    for cfg in (small, large):
        kernels = estimate(cfg, device_type=device_type)["step"]["kernels"]
        # One of each (they are seconds on a busy CPU, and the first job waits for them); a run's own figure.
        replay_s = _seconds(lambda cfg=cfg: estimate(cfg, device_type=device_type))
        run_s = run_experiment(cfg)["duration_s"]
        points.append((kernels, replay_s, run_s))
    (k0, r0, d0), (k1, r1, d1) = points
    steps, timed = PROBE["steps"], PROBE["timing_steps"]
    replay_us = max(0.0, (r1 - r0) / (k1 - k0) * 1e6)
    slope_us = (d1 - d0) / (k1 - k0) * 1e6
    # An instrumented step costs at least a plain one; the FLOP-counting step is instrumented too.
    tracked_us = max(op_us, (slope_us - replay_us - timed * op_us) / (steps + 1))
    fixed_s = max(0.0, d0 - k0 * (replay_us + (steps + 1) * tracked_us + timed * op_us) * 1e-6)
    costs = {"fixed_s": sig(fixed_s), "replay_us": sig(replay_us), "tracked_us": sig(tracked_us)}
    if device_type == "cpu":
        costs["load"] = mean_load(load, load_now())  # what they were measured under (steptime.contention)
    return costs


def _seconds(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def calibrated_report(device_type: str) -> dict:
    """The worker's device report's rates, calibrated (see rates_report)."""
    return rates_report(device_type, calibrate)
