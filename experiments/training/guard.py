"""Correctness guard: a memory strategy must not change the gradients (beyond a documented tolerance, per precision:
experiments/core/tolerance.py GRADIENT_TOLERANCE)."""

from __future__ import annotations

import torch

from ..core.config import ExperimentConfig
from ..core.tolerance import GRADIENT_BASELINE, gradient_tolerance
from ..measure.device import resolve_device
from ..measure.fits import check_fits
from .models import seed_lambda_forward
from .step import build_state, train_step
from .strategies import float32_precision


def _gradients(
    cfg: ExperimentConfig, device: torch.device, forward=None, weights: list[torch.Tensor] | None = None
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(gradients of the first step, the initial weights). `weights`: start from these, cast to the model's dtype
    (then no copy of them is returned)."""
    state = build_state(cfg, device)
    model = state.model
    if weights is not None:
        # Pure bf16 draws its initial weights in bf16, which are other numbers than fp32's draw from the same
        # seed: the comparison is only about the precision of the step if both start from the same weights.
        with torch.no_grad():
            for p, w in zip(model.parameters(), weights, strict=True):
                p.copy_(w)
    initial = [p.detach().clone() for p in model.parameters()] if weights is None else []
    if forward is not None:
        model.forward = forward.__get__(model)
    # SGD with lr 0 keeps the weights, so only the gradients of the first step are compared.
    state.optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    with float32_precision(cfg):
        train_step(state)
    # GradScaler.step unscaled the .grad tensors in place: they are true gradients here.
    return [p.grad.detach().float().cpu() for p in model.parameters()], initial


def check_gradients(cfg: ExperimentConfig, forward=None) -> dict:
    """Run `cfg` and its strict fp32 baseline (no checkpointing, no accumulation, no TF32) from the same seed and
    the same initial weights (the baseline's, cast to the configuration's dtype).

    `forward` replaces the model's forward (used to show that the syllabus's late-binding
    checkpoint lambda is caught). Returns the largest absolute and relative differences.
    """
    device = resolve_device(cfg.device)
    baseline_cfg = cfg.replace(precision=GRADIENT_BASELINE, checkpoint="none", accum=1)
    check_fits(baseline_cfg, device, copies=2)  # the baseline's gradients are kept while the candidate runs
    reference, weights = _gradients(baseline_cfg, device)
    candidate, _ = _gradients(cfg, device, forward, weights)
    del weights
    max_abs = max((a - b).abs().max().item() for a, b in zip(candidate, reference, strict=True))
    diff = torch.cat([(a - b).flatten() for a, b in zip(candidate, reference, strict=True)])
    ref = torch.cat([b.flatten() for b in reference])
    rel = (diff.norm() / ref.norm().clamp_min(1e-30)).item()
    tol = gradient_tolerance(cfg, device.type)
    return {
        "max_abs_diff": max_abs,
        "max_rel_diff": rel,
        "tolerance": tol,
        "ok": rel <= tol,
        "precision": cfg.precision,
        "baseline_precision": GRADIENT_BASELINE,
        "checkpoint": cfg.checkpoint,
        "accum": cfg.accum,
    }


__all__ = ["check_gradients", "seed_lambda_forward"]
