"""Precision, optimizer and gradient-scaling choices, built from the configuration."""

from __future__ import annotations

import contextlib

import torch

from .config import ExperimentConfig

AMP_DTYPES = {"amp_fp16": torch.float16, "amp_bf16": torch.bfloat16}


def autocast(cfg: ExperimentConfig, device: torch.device):
    if cfg.precision in AMP_DTYPES:
        return torch.amp.autocast(device.type, dtype=AMP_DTYPES[cfg.precision])
    return contextlib.nullcontext()


def make_scaler(cfg: ExperimentConfig, device: torch.device) -> torch.amp.GradScaler | None:
    # Only fp16 needs loss scaling; bf16 has fp32's exponent range.
    return torch.amp.GradScaler(device.type) if cfg.precision == "amp_fp16" else None


def make_optimizer(cfg: ExperimentConfig, params) -> torch.optim.Optimizer:
    kwargs = {}
    if cfg.optimizer_impl == "foreach":
        kwargs["foreach"] = True
    elif cfg.optimizer_impl == "for-loop":
        kwargs["foreach"] = False
    elif cfg.optimizer_impl == "fused":
        kwargs["fused"] = True
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=1e-3, **kwargs)
    if cfg.optimizer == "sgd_momentum":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9, **kwargs)
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=1e-4, **kwargs)
    return torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01, **kwargs)


def optimizer_state_tensors(opt: torch.optim.Optimizer):
    for state in opt.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                yield value


@contextlib.contextmanager
def float32_precision(cfg: ExperimentConfig):
    """fp32 means full fp32 matmuls and convolutions; tf32 lets both use TF32 tensor cores."""
    old_matmul = torch.get_float32_matmul_precision()
    old_cudnn = torch.backends.cudnn.allow_tf32
    tf32 = cfg.precision == "tf32"
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    torch.backends.cudnn.allow_tf32 = tf32
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(old_matmul)
        torch.backends.cudnn.allow_tf32 = old_cudnn
