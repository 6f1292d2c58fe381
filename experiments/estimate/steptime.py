"""Step time and run duration before running: a step's work (from the fake-tensor replay) over the device's measured
rates (experiments/estimate/throughput.py). Torch-free.

    compute  = FLOPs / matmul rate of the precision the op runs in (tensor cores for TF32 and half precision;
               PyTorch's fp32 default runs convolutions in TF32 and matmuls in full fp32)
    memory   = bytes the kernels read and write / copy bandwidth
    dispatch = kernels x cost of one small eager op (on a GPU, measured per model family)
On a GPU the host dispatches while the device computes, so the step takes the larger of dispatch and
compute + memory (a launch-bound step is all dispatch), the latter scaled by how far a real step of the model
family and precision stayed from it on this GPU; on a CPU they add up, and are scaled by how far a real step of the
model family and precision stayed from that roofline when the rates were measured (its efficiency). Real
kernels rarely reach the peak rates, so the prediction is a range around it (wider on a CPU).

On a CPU shared with other processes, a step gets the cores' time in proportion to its threads among all the
runnable ones (the load average counts those): the prediction scales by how that share changed between the
moment the rates were measured and the moment the page asks.
"""

from __future__ import annotations

import os

COMPUTE_DTYPE = {
    "fp32": "fp32",
    "fp32_strict": "fp32",
    "tf32": "tf32",
    "amp_fp16": "fp16",
    "amp_bf16": "bf16",
    "bf16": "bf16",
}
# What cuDNN's convolutions compute in, where it differs from the matmuls.
CONV_DTYPE = dict(COMPUTE_DTYPE, fp32="tf32")
RANGE = (0.8, 3.0)
# A CPU's kernels vary more with the shapes than a GPU's, beyond what the efficiency probes see (a micro-batch of
# 4 runs its matmuls at half the rate of the probes', some bf16 shapes at four times it): on a seeded grid (seed
# 101, docs/cpu-speed.md) steps took 0.5x to 4.0x the calibrated roofline, runs 1.0x to 4.6x.
CPU_RANGE = (0.5, 4.5)
# Without a measured run cost (rates of an older worker): the instrumented steps against a timed one.
INSTRUMENTED_FACTOR = 2.5


def current_load() -> float | None:
    """Runnable threads on this machine, averaged over the last minute (None where the system has no figure)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def _busy(load: float, threads: int, cores: int) -> float:
    return max(1.0, (load + min(threads, cores)) / cores)


def contention(rates: dict, load: float | None) -> float:
    """How many times longer a CPU step takes now than when the rates were measured: with `load` other threads
    runnable, a step's threads get cores / (load + threads) of a core each once the cores are oversubscribed."""
    threads, cores = rates.get("threads"), rates.get("cores")
    if load is None or not threads or not cores:
        return 1.0
    return _busy(load, threads, cores) / _busy(rates.get("load") or 0.0, threads, cores)


def efficiency(rates: dict, model: str | None, precision: str) -> float:
    """How many times its roofline a real training step of this model family and precision took when the rates
    were measured (throughput._efficiency; 1 where it was not measured, as on a GPU)."""
    measured = rates.get("efficiency") or {}
    return (measured.get(model) or 1.0) * (measured.get(precision) or 1.0)


def family(model: str, model_source: str | None, step: dict) -> str:
    """The model family whose measured costs time a step: the built-in family, or for a model of one's own (a preset,
    a Hugging Face or torchvision architecture, an import) the one its work resembles: a CNN where convolutions do
    most of the arithmetic (ResNet-50), a transformer otherwise (their linear layers and attention)."""
    if not model_source:
        return model
    return "cnn" if step.get("conv_flops", 0) * 2 >= step.get("flops", 0) > 0 else "transformer"


def gpu_efficiency(rates: dict, model: str | None, precision: str) -> float:
    """How many times its predicted work a GPU step of this model family and precision took when the rates were
    measured (gpu_efficiency.py; 1 where it was not measured)."""
    return ((rates.get("gpu_efficiency") or {}).get(model) or {}).get(precision) or 1.0


def predict_step_ms(
    step: dict, rates: dict, precision: str, device_type: str, load: float | None = None, model: str | None = None
) -> dict:
    """`load`: the machine's load average now (current_load()); on a CPU the step scales with it.
    `model`: the model family, whose measured efficiency scales a CPU step and whose op cost sets a GPU step's
    dispatch."""
    conv = step.get("conv_flops", 0)
    compute = _seconds(step["flops"] - conv, rates, COMPUTE_DTYPE.get(precision, "fp32")) + _seconds(
        conv, rates, CONV_DTYPE.get(precision, "fp32")
    )
    memory = step["bytes"] / (rates["bandwidth_gbs"] * 1e9)
    op_us = (rates.get("op_us_by_model") or {}).get(model) if device_type == "cuda" else None
    dispatch = step["kernels"] * (op_us or rates["op_us"]) * 1e-6
    cpu = device_type == "cpu"
    if cpu:
        scale = efficiency(rates, model, precision) * contention(rates, load)
        center = (compute + memory + dispatch) * scale
    else:
        scale = gpu_efficiency(rates, model, precision)
        center = max(dispatch, (compute + memory) * scale)
    bound = "dispatch" if not cpu and center == dispatch else ("compute" if compute >= memory else "memory")
    low, high = CPU_RANGE if cpu else RANGE
    center_ms = center * 1e3
    return {
        "low_ms": center_ms * low,
        "high_ms": center_ms * high,
        "center_ms": center_ms,
        "range": [low, high],
        "bound": bound,
        "compute_ms": compute * 1e3,
        "memory_ms": memory * 1e3,
        "dispatch_ms": dispatch * 1e3,
        "scale": scale,
    }


def _seconds(flops: float, rates: dict, dtype: str) -> float:
    # A TF32 convolution is taken to run at the TF32 matmul rate: both are the same tensor-core arithmetic.
    rate = rates["tflops"].get(dtype) or rates["tflops"]["fp32"]
    return flops / (rate * 1e12)


def predict_run_s(
    step_ms: dict,
    steps: int,
    timing_steps: int,
    rates: dict | None = None,
    kernels: int | None = None,
    load: float | None = None,
) -> tuple[float, float]:
    """A whole run as the engine does it: the fit check's replay, the instrumented steps, the timed steps, one
    FLOP-counting step, and what every run costs besides (all measured by throughput._run_costs)."""
    run = (rates or {}).get("run")
    if not run or kernels is None:
        n = steps * INSTRUMENTED_FACTOR + timing_steps + 1
        return step_ms["low_ms"] * n / 1e3, step_ms["high_ms"] * n / 1e3
    # Instrumented steps synchronise at every phase boundary: their arithmetic does not overlap the dispatch.
    scale = step_ms.get("scale", 1.0)
    work_ms = (step_ms["compute_ms"] + step_ms["memory_ms"]) * scale
    tracked = steps + 1
    # The run's own costs were measured under the rates' load; only the load's change scales them.
    overhead_s = run["fixed_s"] + kernels * (run["replay_us"] + tracked * run["tracked_us"]) * 1e-6
    busy = contention({**rates, "load": run.get("load")}, load)
    center = overhead_s * busy + (tracked * work_ms + timing_steps * step_ms["center_ms"]) / 1e3
    low, high = step_ms["range"]
    return center * low, center * high
