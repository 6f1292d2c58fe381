"""Precision, optimizer and gradient-scaling choices, built from the configuration."""

from __future__ import annotations

import contextlib

import torch

from ..core.config import ExperimentConfig
from ..core.finetune import BNB_OPTIMIZERS
from .finetune import bnb_optimizer, trainable
from .fp32_math import fp32_mode, mode_of

AMP_DTYPES = {"amp_fp16": torch.float16, "amp_bf16": torch.bfloat16}


def autocast(cfg: ExperimentConfig, device: torch.device):
    if cfg.precision in AMP_DTYPES:
        return torch.amp.autocast(device.type, dtype=AMP_DTYPES[cfg.precision])
    return contextlib.nullcontext()


def make_scaler(cfg: ExperimentConfig, device: torch.device) -> torch.amp.GradScaler | None:
    # Only fp16 needs loss scaling; bf16 has fp32's exponent range.
    return torch.amp.GradScaler(device.type) if cfg.precision == "amp_fp16" else None


def make_optimizer(cfg: ExperimentConfig, params) -> torch.optim.Optimizer:
    params = trainable(params)
    if cfg.optimizer in BNB_OPTIMIZERS:
        return bnb_optimizer(cfg, params)
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


def float32_precision(cfg: ExperimentConfig):
    """The fp32 arithmetic of cfg's precision for the duration of a block (experiments/training/fp32_math.py): fp32 is
    PyTorch's defaults (matmuls in full fp32, cuDNN convolutions in TF32), fp32_strict turns TF32 off for
    convolutions too, tf32 turns it on for matmuls too."""
    return fp32_mode(mode_of(cfg.precision))
