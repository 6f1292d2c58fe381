"""Does a data-parallel step give the single-device update? Element by element, within what rounding allows.

The reference is one step of the same model, from the same weights, on one device over the whole global batch.
A correct data-parallel step computes the same gradient with its sums in another order (each rank's slice, then
the all-reduce), so every gradient element may differ by the rounding of those sums. The optimizer turns that into
a difference of the update, and it can be large where the update is sensitive: Adam's first step is
lr * g / (|g| + eps), about lr * sign(g), so an element whose gradient is near zero (an attention key bias, whose
exact gradient is 0, is all rounding) may move by anything between -lr and lr on either side.

Per element, the tolerance is
    the largest change of the optimizer's first-step update over gradients within +-delta of the reference's
    + the rounding of that update and of the new weight in the parameter's dtype,
    delta = max |g| of the element's tensor x (OUTPUT_ROUNDINGS x eps(the format the step computes in)
                                               + SUM_ROUNDINGS x sqrt(terms summed per gradient) x eps(fp32)).
Half-precision matmuls accumulate in fp32 and round their outputs once; a sum of n fp32 terms in another order
differs by about sqrt(n) roundings of its terms, and the terms of a cancelling sum (a gradient near 0) are of the
size of the tensor's largest gradient. A rank that skips the all-reduce, or sums where it should average under
SGD, is off by the size of the gradient itself: far outside. Adam's first step hardly depends on the gradient's
scale: a wrong scaling moves only the elements whose gradient is near eps, which one Adam step may or may not
have; a missing all-reduce it shows. In pure bf16 with the sandbox's learning rates, one step moves most weights
by less than their bf16 spacing: there the check can only say that the weights agree to that spacing.
"""

from __future__ import annotations

import math

import torch

from ..training.step import build_state, train_step
from ..training.strategies import float32_precision
from .rank import full_parameters, rank_batch, rank_setup, sync_phase, sync_setter

# Measured on CPU (gloo, 2 ranks, seeded grids of every model, precision, optimizer and strategy): a correct
# step's gradient was at most 4.2 roundings of its tensor's largest element off in half precision, and at most
# 1.1 x sqrt(terms) roundings in fp32. The factors leave about 4x and 7x of room; a wrong gradient is off by
# about 1/eps roundings.
OUTPUT_ROUNDINGS = 16
SUM_ROUNDINGS = 8
# Roundings in one element's step (Adam: the moments, the square root, the +eps, the division, the scaling).
STEP_ROUNDINGS = 6
FP32_EPS = torch.finfo(torch.float32).eps


def summed_terms(cfg) -> int:
    """How many terms one weight's gradient sums over the global batch: samples x the positions of a sample
    (tokens of a sequence, pixels of an image)."""
    positions = {"transformer": cfg.seq_len, "cnn": cfg.image_size**2}.get(cfg.model, 1)
    return cfg.batch * positions


def compute_eps(precision: str, device_type: str, model: str) -> float:
    """The machine epsilon of the format the forward and backward compute in (what reordered sums round to)."""
    if precision in ("amp_bf16", "bf16"):
        return torch.finfo(torch.bfloat16).eps
    if precision in ("amp_fp16", "tf32"):
        return torch.finfo(torch.float16).eps  # TF32 keeps fp16's 10 mantissa bits
    tf32 = device_type == "cuda" and (
        torch.get_float32_matmul_precision() != "highest" or (model == "cnn" and torch.backends.cudnn.allow_tf32)
    )
    return torch.finfo(torch.float16).eps if tf32 else torch.finfo(torch.float32).eps


def first_step_update(g: torch.Tensor, p: torch.Tensor, optimizer: torch.optim.Optimizer) -> torch.Tensor:
    """What the optimizer's first step adds to p for gradient g (fp32), as torch computes it."""
    group = optimizer.param_groups[0]
    lr, wd = group["lr"], group.get("weight_decay", 0.0)
    if isinstance(optimizer, torch.optim.SGD):  # the momentum buffer starts as the gradient itself
        return -lr * (g + wd * p)
    if isinstance(optimizer, torch.optim.AdamW):  # bias-corrected first moments: m / sqrt(v) = g / |g|
        return -lr * wd * p - lr * g / (g.abs() + group["eps"])
    if isinstance(optimizer, torch.optim.Adam):
        g = g + wd * p
        return -lr * g / (g.abs() + group["eps"])
    raise ValueError(f"optimizer: no first-step rule for {type(optimizer).__name__}")


def gradient_delta(grad: torch.Tensor, grad_eps: float, terms: int) -> float:
    """How far a correct data-parallel step's gradient element may be from the reference's (see the top)."""
    return float(grad.abs().max()) * (OUTPUT_ROUNDINGS * grad_eps + SUM_ROUNDINGS * math.sqrt(terms) * FP32_EPS)


def tolerance(
    before: torch.Tensor, grad: torch.Tensor | None, optimizer, grad_eps: float, param_eps: float, terms: int
) -> torch.Tensor:
    """The per-element tolerance of one parameter tensor's new value, in fp32."""
    if grad is None or not torch.isfinite(grad).all():
        # No gradient: the optimizer leaves the tensor alone (a skipped fp16 step, too).
        return 2 * param_eps * before.abs()
    delta = gradient_delta(grad, grad_eps, terms)
    update = first_step_update(grad, before, optimizer)
    sensitivity = torch.maximum(
        (first_step_update(grad + delta, before, optimizer) - update).abs(),
        (first_step_update(grad - delta, before, optimizer) - update).abs(),
    )
    # The new weight is rounded on both sides (half an ulp each, an ulp is at most eps * |w|): twice that.
    rounding = param_eps * (2 * (before + update).abs() + STEP_ROUNDINGS * update.abs())
    return sensitivity + rounding


def compare(
    after: list[torch.Tensor],
    expected: list[torch.Tensor],
    before: list[torch.Tensor],
    grads: list[torch.Tensor | None],
    optimizer,
    grad_eps: float,
    param_eps: float,
    terms: int,
    rank_grads: list[torch.Tensor | None] | None = None,
) -> dict:
    """The verdict on a data-parallel step: every element of `after` within its tolerance of `expected`.
    `rank_grads` (the rank's gradients) only inform: how close they came to the gradient delta assumed."""
    worst, mismatched, count, diff, moved, grad_off = 0.0, 0, 0, 0.0, 0.0, None
    for i, (a, e, b, g) in enumerate(zip(after, expected, before, grads, strict=True)):
        tol = tolerance(b, g, optimizer, grad_eps, param_eps, terms)
        off = (a - e).abs()
        worst = max(worst, float((off / tol.clamp_min(torch.finfo(torch.float32).tiny)).max()))
        mismatched += int((off > tol).sum())
        count += e.numel()
        diff = max(diff, float(off.max()))
        moved = max(moved, float((e - b).abs().max()))
        if rank_grads is not None and g is not None and rank_grads[i] is not None and torch.isfinite(g).all():
            delta = gradient_delta(g, grad_eps, terms)
            if delta > 0:
                grad_off = max(grad_off or 0.0, float((rank_grads[i] - g).abs().max()) / delta)
    return {
        "max_abs_diff": diff,
        "max_update": moved,
        "relative": diff / moved if moved else None,
        "mismatched": mismatched,
        "elements": count,
        "worst_vs_tolerance": worst,
        "ok": mismatched == 0,
        "gradient_vs_delta": grad_off,
        "grad_eps": grad_eps,
        "terms": terms,
        "tolerance": "per element: the first-step update's change for a gradient off by the rounding of "
        "reordered sums, plus the rounding of the new weight",
    }


def check_update(dcfg, rank: int, device: torch.device, tamper=None) -> dict | None:
    """One step sharded vs one step on a single device (same seed, same global batch): do the parameters agree,
    element by element, within what reordered sums allow?

    Every rank takes part (FSDP2 gathers); rank 0 also runs the single-device baseline and answers.
    `tamper(model, strategy)`, called on every rank after wrapping, lets a test break the data-parallel step."""
    cfg = dcfg.rank_config
    with float32_precision(cfg):
        grad_eps = compute_eps(cfg.precision, device.type, cfg.model)
        inputs, targets = rank_batch(dcfg, rank)
        state = build_state(cfg, device, rank_setup(dcfg, device, inputs, targets, tamper=tamper, copy=False))
        train_step(state, 0, sync_phase(sync_setter(state.model, dcfg.strategy), cfg.accum))
        after = full_parameters(state.model, dcfg.strategy)
        rank_grads = full_parameters(state.model, dcfg.strategy, grads=True)
        del state, inputs, targets
        if rank != 0:
            return None
        base = build_state(dcfg.global_config.replace(device=device.type), device)
        before = [p.detach().float().cpu().clone() for p in base.model.parameters()]
        train_step(base)
        expected = [p.detach().float().cpu().clone() for p in base.model.parameters()]
        # After the step: GradScaler unscaled them in place, so these are the gradients the step used.
        grads = [None if p.grad is None else p.grad.detach().float().cpu() for p in base.model.parameters()]
        param_eps = torch.finfo(next(base.model.parameters()).dtype).eps
        optimizer = base.optimizer
    del base
    return compare(
        after, expected, before, grads, optimizer, grad_eps, param_eps, summed_terms(dcfg.global_config), rank_grads
    )
