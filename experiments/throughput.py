"""What this device achieves, measured once per process: matmul TFLOP/s per precision, copy bandwidth, and the
cost of one small eager op. The step-time prediction (experiments/steptime.py) divides a step's work by these."""

from __future__ import annotations

import functools
import time

import torch

from .fp32_math import fp32_mode


def _timed(fn, device: torch.device, repeat: int) -> float:
    """Seconds per call of fn, after one warm-up call."""
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for _ in range(repeat):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - t0) / repeat


@functools.lru_cache(maxsize=4)
def measure(device_type: str) -> dict:
    device = torch.device(device_type)
    cuda = device_type == "cuda"
    n = 4096 if cuda else 512
    rates = {}
    for name, dtype, mode in (("fp32", torch.float32, "fp32"), ("tf32", torch.float32, "tf32"),
                              ("bf16", torch.bfloat16, "fp32"), ("fp16", torch.float16, "fp32")):
        if not cuda and name in ("tf32", "fp16"):
            continue
        with fp32_mode(mode):
            a = torch.randn(n, n, device=device, dtype=dtype)
            seconds = _timed(lambda a=a: a @ a, device, 10 if cuda else 3)
        rates[name] = 2 * n**3 / seconds / 1e12
    if not cuda:
        rates.setdefault("tf32", rates["fp32"])
        rates.setdefault("fp16", rates["bf16"])
    big = torch.empty((256 if cuda else 32) * 2**20, dtype=torch.uint8, device=device)
    out = torch.empty_like(big)
    bandwidth = 2 * big.numel() / _timed(lambda: out.copy_(big), device, 10 if cuda else 3) / 1e9
    return {"tflops": {k: round(v, 3) for k, v in rates.items()}, "bandwidth_gbs": round(bandwidth, 1),
            "op_us": round(_eager_op_us(device), 2)}


def _eager_op_us(device: torch.device) -> float:
    """What one kernel of an eager training step costs when the arithmetic is negligible: a tiny real step
    (modules, autograd, optimizer), timed, divided by the kernels the replay counts in the same step."""
    from .config import ExperimentConfig
    from .replay import replay
    from .training import build_state, train_step

    cfg = ExperimentConfig(layers=4, width=32, batch=8, device=device.type, optimizer="adam")
    state = build_state(cfg, device)
    for _ in range(3):
        train_step(state)
    seconds = _timed(lambda: train_step(state), device, 30)
    kernels = replay(cfg.replace(optimizer_impl="foreach") if device.type == "cuda" else cfg)["step"]["kernels"]
    return seconds / kernels * 1e6
