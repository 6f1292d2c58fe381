"""Exercise 3, graded: the leaky loop. The learner's fixes become the engine's exercise loop
(experiments/labs/leaks.py, "exercise_loop"); the run's memory curve and its measured gradient error decide."""

from __future__ import annotations

from dataclasses import dataclass

from course.grading.common import SettingsError, message, number, section
from course.units import fmt_bytes

CHECKS = ("flat", "grads")


@dataclass(frozen=True)
class Settings:
    """The exercise's settings (its meta.json "grading"): the leak run's size, the course's loop and the fixes the
    learner may tick, each a change of one or more of the loop's habits (experiments.labs.leaks.LOOP_CHOICES)."""

    steps: int
    batch: int
    width: int
    layers: int
    flat_share: float  # flat: the curve grows by less than this share of one (batch x width x 4 B) output per step
    loop: dict  # the course's loop: habit -> value
    fixes: dict  # fix -> {habit: value}

    @property
    def groups(self) -> list[tuple[str, ...]]:
        """Fixes that change the same habit (the same line of the loop): only one of each group can be applied."""
        by_habit: dict[str, list[str]] = {}
        for fix, change in self.fixes.items():
            for habit in change:
                by_habit.setdefault(habit, []).append(fix)
        return [tuple(fixes) for fixes in by_habit.values() if len(fixes) > 1]

    @property
    def total(self) -> int:
        return len(CHECKS)


def settings(meta: dict) -> Settings:
    g = section(meta)
    sizes = {name: int(number(g, name, 1, 65536, meta, integer=True)) for name in ("steps", "batch", "width", "layers")}
    loop, fixes = g.get("loop"), g.get("fixes")
    if not isinstance(loop, dict) or not loop:
        raise SettingsError(
            f"{meta.get('id', '?')}/meta.json grading.loop: got {loop!r}; allowed: the course "
            "loop's habits and their values"
        )
    if (
        not isinstance(fixes, dict)
        or not fixes
        or any(not isinstance(c, dict) or not c or set(c) - set(loop) for c in fixes.values())
    ):
        raise SettingsError(
            f"{meta.get('id', '?')}/meta.json grading.fixes: got {fixes!r}; allowed: fix -> a "
            f"change of the loop's habits ({', '.join(loop)})"
        )
    return Settings(**sizes, flat_share=number(g, "flat_share", 0.0, 1.0, meta), loop=dict(loop), fixes=dict(fixes))


def validate(s: Settings, fixes: list[str]) -> list[dict]:
    errors = [message("ex3.err.unknown", fix=f) for f in fixes if f not in s.fixes]
    for group in s.groups:
        chosen = [f for f in group if f in fixes]
        if len(chosen) > 1:
            errors.append(message("ex3.err.conflict", first=chosen[0], second=chosen[1]))
    return errors


def loop_of(s: Settings, fixes: list[str]) -> dict:
    """The course's loop with the fixes applied: the engine's loop habits (experiments.labs.leaks.LOOP_CHOICES)."""
    loop = dict(s.loop)
    for fix in fixes:
        loop.update(s.fixes.get(fix) or {})
    return loop


def code(loop: dict) -> str:
    """The loop the run executes, as the learner would write it."""
    cache = {
        "keep": "self.cache.append(out)",
        "detach": "self.cache.append(out.detach())",
        "none": "# self.cache.append(out)",
    }[loop["cache"]]
    keep = {
        "loss": "losses.append(loss)",
        "detach": "losses.append(loss.detach())",
        "item": "losses.append(loss.item())",
    }[loop["keep"]]
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


def output_bytes(s: Settings, result: dict) -> int:
    """One fp32 output of the model (batch x width x 4 B): what every leaking habit keeps at least once per step."""
    return int(result.get("batch") or s.batch) * int(result.get("width") or s.width) * 4


def threshold(s: Settings, result: dict) -> float:
    return s.flat_share * output_bytes(s, result)


def verdict(s: Settings, result: dict, tolerance: float) -> dict:
    """Solved when the curve is flat and the last step's gradient was that step's own (both measured): the
    gradient the last step used against that step's own, within `tolerance` (the guard's, relative)."""
    growth = float(result.get("growth_bytes_per_step") or 0)
    limit = threshold(s, result)
    flat = growth < limit
    error = result.get("gradient_error")
    grads_ok = error is not None and error <= tolerance
    out = output_bytes(s, result)
    why = []
    if not flat:
        why.append(
            message(
                "ex3.why.grows",
                growth=fmt_bytes(growth),
                outputs=f"{growth / out:.2f}",
                output=fmt_bytes(out),
                limit=fmt_bytes(limit),
            )
        )
        loop = result.get("loop") or {}
        for habit, value in (("keep", loop.get("keep")), ("cache", loop.get("cache"))):
            if value in ("loss", "keep", "detach"):
                why.append(message(f"ex3.why.{habit}_{value}"))
    if error is None:
        why.append(message("ex3.why.no_gradient"))
    elif not grads_ok:
        why.append(
            message(
                "ex3.why.gradients",
                error=f"{error:.3g}",
                tol=f"{tolerance:.0e}",
                steps=len(result.get("per_step") or []) - 1,
            )
        )
    return {
        "flat": flat,
        "growth": growth,
        "limit": limit,
        "grads_ok": grads_ok,
        "gradient_error": error,
        "passed": int(flat) + int(grads_ok),
        "solved": flat and grads_ok,
        "why": why,
    }
