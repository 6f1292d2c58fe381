"""What this device achieves, measured once per process: matmul TFLOP/s per precision, copy bandwidth, the cost of
one small eager op, and what a whole run costs besides its steps. The step-time and run-duration predictions
(experiments/estimate/steptime.py) divide a step's work by these.

Every figure is the median of a few repeats, taken under the machine's load of the moment, which is recorded with
them on a CPU: the prediction scales by the load it sees later (steptime.contention). On a CPU the training steps'
own kernels (small matmuls, convolutions, their backward, autocast's casts) reach only a part of a large matmul's
rate: a real step of each model family and precision is timed against its roofline (`efficiency`)."""

from __future__ import annotations

import functools
import os
import statistics
import time

import torch

from ..training.fp32_math import fp32_mode

REPEATS = 3
# The run-cost probe: two tiny configurations (negligible arithmetic) that differ only in their kernel count.
PROBE = {"width": 16, "batch": 4, "steps": 2, "timing_steps": 2, "optimizer": "adam"}
PROBE_LAYERS = (1, 16)


def _timed(fn, device: torch.device, repeat: int) -> float:
    """Seconds per call of fn after one warm-up call: the median of REPEATS batches of `repeat` calls."""
    fn()
    batches = []
    for _ in range(REPEATS):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        for _ in range(repeat):
            fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        batches.append((time.perf_counter() - t0) / repeat)
    return statistics.median(batches)


def _sig(x: float, digits: int = 4) -> float:
    return float(f"{x:.{digits}g}")


@functools.lru_cache(maxsize=4)
def measure(device_type: str) -> dict:
    """The rates a step's work is divided by (seconds on a busy CPU; every run's device report carries them)."""
    load_before = _load()
    device = torch.device(device_type)
    cuda = device_type == "cuda"
    rates = {}
    # On a CPU every precision is measured too: half-precision matmuls there are tens of times slower than
    # fp32, and fp16 and bf16 differ by CPU (an ISA may have one and not the other).
    for name, dtype, mode in (("fp32", torch.float32, "fp32"), ("tf32", torch.float32, "tf32"),
                              ("bf16", torch.bfloat16, "fp32"), ("fp16", torch.float16, "fp32")):
        half = dtype != torch.float32
        n = 4096 if cuda else (256 if half else 512)  # a CPU's half-precision matmul: seconds at 512
        with fp32_mode(mode):
            a = torch.randn(n, n, device=device, dtype=dtype)
            seconds = _timed(lambda a=a: a @ a, device, 10 if cuda else (1 if half else 3))
        rates[name] = 2 * n**3 / seconds / 1e12
    big = torch.empty((256 if cuda else 32) * 2**20, dtype=torch.uint8, device=device)
    out = torch.empty_like(big)
    bandwidth = 2 * big.numel() / _timed(lambda big=big, out=out: out.copy_(big), device, 10 if cuda else 3) / 1e9
    del big, out
    result = {"tflops": {k: _sig(v) for k, v in rates.items()}, "bandwidth_gbs": _sig(bandwidth),
              "op_us": _sig(_eager_op_us(device))}
    if not cuda:
        # What the load of other processes is shared with, and the load these rates were measured under
        # (steptime.contention).
        result.update(threads=torch.get_num_threads(), cores=len(os.sched_getaffinity(0)),
                      load=_mean_load(load_before, _load()))
    return result


@functools.lru_cache(maxsize=4)
def calibrate(device_type: str) -> dict:
    """The rates plus what a prediction of a whole run needs: the run's own costs and, on a CPU, the training
    steps' efficiency. Tens of seconds on a busy CPU: the worker measures it once, after its first report."""
    rates = measure(device_type)
    out = dict(rates, run=_run_costs(device_type, rates["op_us"]))
    if device_type == "cpu":
        out["efficiency"] = _efficiency(torch.device("cpu"), rates)
    return out


def _mean_load(*loads) -> float | None:
    known = [x for x in loads if x is not None]
    return _sig(sum(known) / len(known)) if known else None


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def _eager_op_us(device: torch.device) -> float:
    """What one kernel of an eager training step costs when the arithmetic is negligible: a tiny real step
    (modules, autograd, optimizer), timed, divided by the kernels the replay counts in the same step."""
    from ..core.config import ExperimentConfig
    from ..training.step import build_state, train_step
    from .replay import replay

    cfg = ExperimentConfig(layers=4, width=32, batch=8, device=device.type, optimizer="adam")
    state = build_state(cfg, device)
    for _ in range(3):
        train_step(state)
    seconds = _timed(lambda: train_step(state), device, 10)
    kernels = replay(cfg.replace(optimizer_impl="foreach") if device.type == "cuda" else cfg)["step"]["kernels"]
    return seconds / kernels * 1e6


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
    from ..core.config import ExperimentConfig
    from ..training.step import build_state, train_step
    from ..training.strategies import float32_precision
    from .replay import replay
    from .steptime import RANGE, predict_step_ms

    def ratio(params: dict, precision: str) -> float:
        cfg = ExperimentConfig(device=device.type, precision=precision, optimizer="adam", **params)
        state = build_state(cfg, device)
        load = _load()
        with float32_precision(cfg):
            seconds = _timed(lambda: train_step(state), device, 1)
        # The roofline at the load of this moment, so that the ratio is the kernels' own.
        center = predict_step_ms(replay(cfg)["step"], rates, precision, device.type,
                                 _mean_load(load, _load()))["low_ms"] / RANGE[0]
        return seconds * 1e3 / center

    out = {family: _sig(ratio(params, "fp32")) for family, params in EFFICIENCY_PROBES.items()}
    base = ratio(HALF_PROBE, "fp32")
    for precision in ("amp_bf16", "amp_fp16", "bf16"):
        out[precision] = _sig(ratio(HALF_PROBE, precision) / base)
    return out


def _run_costs(device_type: str, op_us: float) -> dict:
    """What a run costs besides the arithmetic of its steps, from two tiny runs through the engine itself (their
    device report carries the rates, measured before):
    fixed_s per run (device report, fit check, history, gc, the allocator's release), replay_us per kernel of a
    step (the fit check replays setup and two steps on fake tensors) and tracked_us per kernel of an
    instrumented step (the storage tracker, the allocation history, the phase boundaries)."""
    from ..core.config import ExperimentConfig
    from ..measure.run import run_experiment
    from .estimator import estimate

    small, large = (ExperimentConfig(layers=n, device=device_type, **PROBE) for n in PROBE_LAYERS)
    run_experiment(small)  # this process's first-call costs (imports, the first dispatch mode) are no run's
    load = _load()
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
    costs = {"fixed_s": _sig(fixed_s), "replay_us": _sig(replay_us), "tracked_us": _sig(tracked_us)}
    if device_type == "cpu":
        costs["load"] = _mean_load(load, _load())  # what they were measured under (steptime.contention)
    return costs


def _seconds(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0
