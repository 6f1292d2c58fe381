"""What this device achieves, measured once per process: matmul TFLOP/s per precision, copy bandwidth and the cost of
one small eager op. The step-time prediction (experiments/estimate/steptime.py) divides a step's work by these; what a
whole run costs besides its steps, and a CPU step's efficiency, are calibrated on top (experiments/estimate/
calibration.py).

Every figure is the median of a few repeats, taken under the machine's load of the moment, which is recorded with
them on a CPU: the prediction scales by the load it sees later (steptime.contention)."""

from __future__ import annotations

import functools
import os
import statistics
import time

import torch

from ..core.config import ExperimentConfig
from ..core.units import MIB
from ..training.fp32_math import fp32_mode
from ..training.step import build_state, train_step
from .replay import replay

REPEATS = 3


def timed(fn, device: torch.device, repeat: int) -> float:
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


def sig(x: float, digits: int = 4) -> float:
    return float(f"{x:.{digits}g}")


@functools.lru_cache(maxsize=4)
def measure(device_type: str) -> dict:
    """The rates a step's work is divided by (seconds on a busy CPU; every run's device report carries them)."""
    load_before = load_now()
    device = torch.device(device_type)
    cuda = device_type == "cuda"
    rates = {}
    # On a CPU every precision is measured too: half-precision matmuls there are tens of times slower than
    # fp32, and fp16 and bf16 differ by CPU (an ISA may have one and not the other).
    for name, dtype, mode in (
        ("fp32", torch.float32, "fp32"),
        ("tf32", torch.float32, "tf32"),
        ("bf16", torch.bfloat16, "fp32"),
        ("fp16", torch.float16, "fp32"),
    ):
        half = dtype != torch.float32
        n = 4096 if cuda else (256 if half else 512)  # a CPU's half-precision matmul: seconds at 512
        with fp32_mode(mode):
            a = torch.randn(n, n, device=device, dtype=dtype)
            seconds = timed(lambda a=a: a @ a, device, 10 if cuda else (1 if half else 3))
        rates[name] = 2 * n**3 / seconds / 1e12
    big = torch.empty((256 if cuda else 32) * MIB, dtype=torch.uint8, device=device)
    out = torch.empty_like(big)
    bandwidth = 2 * big.numel() / timed(lambda big=big, out=out: out.copy_(big), device, 10 if cuda else 3) / 1e9
    del big, out
    result = {
        "tflops": {k: sig(v) for k, v in rates.items()},
        "bandwidth_gbs": sig(bandwidth),
        "op_us": sig(_eager_op_us(device)),
    }
    if cuda:
        # A GPU step of a small model is all dispatch, so each family's op cost is measured on its own: costed at
        # a linear layer's, small CNNs on an H200 ran up to 1.6x above the top of their predicted range.
        others = {name: sig(_eager_op_us(device, cfg)) for name, cfg in OP_PROBES.items() if name != "mlp"}
        result["op_us_by_model"] = {"mlp": result["op_us"], **others}  # op_us is the MLP's probe already
    else:
        # What the load of other processes is shared with, and the load these rates were measured under
        # (steptime.contention).
        result.update(
            threads=torch.get_num_threads(), cores=len(os.sched_getaffinity(0)), load=mean_load(load_before, load_now())
        )
    return result


def mean_load(*loads) -> float | None:
    known = [x for x in loads if x is not None]
    return sig(sum(known) / len(known)) if known else None


def load_now() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


# Tiny steps of each model family (negligible arithmetic): what one of their kernels costs the host.
OP_PROBES = {
    "mlp": {"layers": 4, "width": 32, "batch": 8},
    "cnn": {"model": "cnn", "layers": 2, "width": 8, "image_size": 16, "batch": 4},
    "transformer": {"model": "transformer", "layers": 1, "width": 32, "heads": 2, "seq_len": 16, "batch": 2},
}


def _eager_op_us(device: torch.device, probe: dict | None = None) -> float:
    """What one kernel of an eager training step costs when the arithmetic is negligible: a tiny real step
    (modules, autograd, optimizer), timed, divided by the kernels the replay counts in the same step."""
    cfg = ExperimentConfig(device=device.type, optimizer="adam", **(probe or OP_PROBES["mlp"]))
    state = build_state(cfg, device)
    for _ in range(3):
        train_step(state)
    seconds = timed(lambda: train_step(state), device, 10)
    kernels = replay(cfg.replace(optimizer_impl="foreach") if device.type == "cuda" else cfg)["step"]["kernels"]
    return seconds / kernels * 1e6


def rates_report(device_type: str, rates=measure) -> dict:
    """The device report's rates: {"rates": ...} (measured once per process), or {"rates_error": ...}: no rates
    means no time prediction, not a failed device report."""
    try:
        return {"rates": rates(device_type)}
    except Exception as e:  # noqa: BLE001 - see above
        return {"rates_error": f"{type(e).__name__}: {e}"}
