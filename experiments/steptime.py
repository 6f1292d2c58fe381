"""Step time before running: a step's work (from the fake-tensor replay) over the device's measured rates. Torch-free.

    compute  = FLOPs / matmul rate of the precision the op runs in (tensor cores for TF32 and half precision;
               PyTorch's fp32 default runs convolutions in TF32 and matmuls in full fp32)
    memory   = bytes the kernels read and write / copy bandwidth
    dispatch = kernels x cost of one small eager op
On a GPU the host dispatches while the device computes, so the step takes the larger of dispatch and
compute + memory (a launch-bound step is all dispatch); on a CPU they add up. Real kernels rarely reach
the peak rates, so the prediction is a range: from the roofline to a few times it.
"""

from __future__ import annotations

COMPUTE_DTYPE = {"fp32": "fp32", "fp32_strict": "fp32", "tf32": "tf32", "amp_fp16": "fp16", "amp_bf16": "bf16",
                 "bf16": "bf16"}
# What cuDNN's convolutions compute in, where it differs from the matmuls.
CONV_DTYPE = dict(COMPUTE_DTYPE, fp32="tf32")
RANGE = (0.8, 3.0)
# The instrumented steps synchronise and track every storage: slower than a timed step.
INSTRUMENTED_FACTOR = 2.5


def predict_step_ms(step: dict, rates: dict, precision: str, device_type: str) -> dict:
    conv = step.get("conv_flops", 0)
    compute = (_seconds(step["flops"] - conv, rates, COMPUTE_DTYPE.get(precision, "fp32"))
               + _seconds(conv, rates, CONV_DTYPE.get(precision, "fp32")))
    memory = step["bytes"] / (rates["bandwidth_gbs"] * 1e9)
    dispatch = step["kernels"] * rates["op_us"] * 1e-6
    center = max(dispatch, compute + memory) if device_type == "cuda" else compute + memory + dispatch
    bound = "dispatch" if device_type == "cuda" and dispatch > compute + memory else (
        "compute" if compute >= memory else "memory")
    return {"low_ms": center * RANGE[0] * 1e3, "high_ms": center * RANGE[1] * 1e3, "bound": bound,
            "compute_ms": compute * 1e3, "memory_ms": memory * 1e3, "dispatch_ms": dispatch * 1e3}


def _seconds(flops: float, rates: dict, dtype: str) -> float:
    # A TF32 convolution is taken to run at the TF32 matmul rate: both are the same tensor-core arithmetic.
    rate = rates["tflops"].get(dtype) or rates["tflops"]["fp32"]
    return flops / (rate * 1e12)


def predict_run_s(step_ms: dict, steps: int, timing_steps: int) -> tuple[float, float]:
    """A whole run: the instrumented steps, the timed steps and one FLOP-counting step."""
    n = steps * INSTRUMENTED_FACTOR + timing_steps + 1
    return step_ms["low_ms"] * n / 1e3, step_ms["high_ms"] * n / 1e3
