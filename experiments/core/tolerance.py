"""How far a precision's gradients may be from strict fp32's (experiments/training/guard.py). Torch-free."""

from __future__ import annotations

# Tolerance per precision on the relative error ||g - g_ref|| / ||g_ref|| over all gradients against strict fp32
# gradients (experiments/training/guard.py), both runs starting from the same weights. Half precision rounds every
# activation to 8 (bf16) or 11 (fp16) mantissa bits, and the errors compound through the layers; pure bf16 also
# rounds the weights and the gradients. fp32 strategies (checkpointing, accumulation) only reorder float
# additions: 1e-4 is generous. TF32 rounds the inputs of every product to 10 mantissa bits.
GRADIENT_TOLERANCE = {"fp32": 1e-4, "fp32_strict": 1e-4, "tf32": 1e-2, "amp_fp16": 5e-2, "amp_bf16": 1e-1, "bf16": 2e-1}
# The reference: IEEE fp32 everywhere, so a TF32 convolution's error is measured, not built into the baseline.
GRADIENT_BASELINE = "fp32_strict"


def gradient_tolerance(cfg, device_type: str) -> float:
    """cfg's tolerance on `device_type`. fp32 with PyTorch's defaults runs cuDNN's convolutions in TF32 on a GPU
    (the CNN is the family with convolutions), so a CNN's fp32 gradients carry TF32's error there."""
    if cfg.precision == "fp32" and cfg.model == "cnn" and device_type == "cuda":
        return GRADIENT_TOLERANCE["tf32"]
    return GRADIENT_TOLERANCE[cfg.precision]
