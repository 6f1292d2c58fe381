"""Exercise 3, graded: the leaky loop. The learner's fixes become the engine's exercise loop
(experiments/labs/leaks.py, "exercise_loop"); the run's memory curve and its measured gradient error decide."""

from __future__ import annotations

from course.grading.common import message
from course.units import fmt_bytes
from experiments.core.config import GRADIENT_TOLERANCE as TOLERANCE

FIXES = ("keep_item", "keep_detach", "zero_grad", "cache_detach", "cache_none")
# Two fixes of one group change the same line of the loop: only one can be applied.
GROUPS = (("keep_item", "keep_detach"), ("cache_detach", "cache_none"))
# Flat: the curve grows by less than this share of one output-sized tensor (batch x width x 4 B) per step.
# Every habit that leaks keeps at least one such tensor per step; a flat loop keeps nothing on the device.
FLAT_SHARE = 0.01
# The gradient a step uses against that step's own gradient: the guard's fp32 tolerance.
GRAD_TOLERANCE = TOLERANCE["fp32"]
STEPS, BATCH, WIDTH, LAYERS = 10, 64, 512, 4


def validate(fixes: list[str]) -> list[dict]:
    errors = [message("ex3.err.unknown", fix=f) for f in fixes if f not in FIXES]
    for group in GROUPS:
        chosen = [f for f in group if f in fixes]
        if len(chosen) > 1:
            errors.append(message("ex3.err.conflict", first=chosen[0], second=chosen[1]))
    return errors


def loop_of(fixes: list[str]) -> dict:
    """The fixes as the engine's loop habits (experiments.labs.leaks.LOOP_CHOICES)."""
    keep = "item" if "keep_item" in fixes else "detach" if "keep_detach" in fixes else "loss"
    cache = "none" if "cache_none" in fixes else "detach" if "cache_detach" in fixes else "keep"
    return {"keep": keep, "zero_grad": "zero_grad" in fixes, "cache": cache}


def code(loop: dict) -> str:
    """The loop the run executes, as the learner would write it."""
    cache = {"keep": "self.cache.append(out)", "detach": "self.cache.append(out.detach())",
             "none": "# self.cache.append(out)"}[loop["cache"]]
    keep = {"loss": "losses.append(loss)", "detach": "losses.append(loss.detach())",
            "item": "losses.append(loss.item())"}[loop["keep"]]
    zero = "    optimizer.zero_grad(set_to_none=True)\n" if loop["zero_grad"] else ""
    return (
        "class Model(nn.Module):\n"
        "    def forward(self, x):\n"
        "        out = self.body(x)\n"
        f"        {cache}\n"
        "        return out\n\n"
        "losses = []\n"
        "for inputs, targets in loader:\n"
        f"{zero}"
        "    loss = F.mse_loss(model(inputs), targets)\n"
        "    loss.backward()\n"
        "    optimizer.step()\n"
        f"    {keep}\n"
    )


def output_bytes(result: dict) -> int:
    return int(result.get("batch") or BATCH) * int(result.get("width") or WIDTH) * 4


def threshold(result: dict) -> float:
    return FLAT_SHARE * output_bytes(result)


def verdict(result: dict) -> dict:
    """Solved when the curve is flat and the last step's gradient was that step's own (both measured)."""
    growth = float(result.get("growth_bytes_per_step") or 0)
    limit = threshold(result)
    flat = growth < limit
    error = result.get("gradient_error")
    grads_ok = error is not None and error <= GRAD_TOLERANCE
    out = output_bytes(result)
    why = []
    if not flat:
        why.append(message("ex3.why.grows", growth=fmt_bytes(growth), outputs=f"{growth / out:.2f}",
                           output=fmt_bytes(out), limit=fmt_bytes(limit)))
        loop = result.get("loop") or {}
        for habit, value in (("keep", loop.get("keep")), ("cache", loop.get("cache"))):
            if value in ("loss", "keep", "detach"):
                why.append(message(f"ex3.why.{habit}_{value}"))
    if error is None:
        why.append(message("ex3.why.no_gradient"))
    elif not grads_ok:
        why.append(message("ex3.why.gradients", error=f"{error:.3g}", tol=f"{GRAD_TOLERANCE:.0e}",
                           steps=len(result.get("per_step") or []) - 1))
    return {"flat": flat, "growth": growth, "limit": limit, "grads_ok": grads_ok, "gradient_error": error,
            "passed": int(flat) + int(grads_ok), "solved": flat and grads_ok, "why": why}
