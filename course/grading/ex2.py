"""Exercise 2, graded: a memory budget challenge. Fit (measured), speed (measured against the unoptimized
baseline and the best known choice) and gradient correctness (the guard), scored against the best known
choice, which the estimator finds over the same option grid the learner picks from."""

from __future__ import annotations

import itertools
import math

from course.grading.common import MIB, message
from course.units import fmt_bytes
from experiments.core import metrics

# The GPU challenge: the course's model at batch 8192 in 2 GiB.
GPU_BASE = {"model": "mlp", "layers": 20, "width": 2048, "batch": 8192, "optimizer": "adam", "precision": "fp32",
            "checkpoint": "none", "accum": 1, "optimizer_impl": "default", "steps": 3, "timing_steps": 5}
GPU_BUDGET = 2 * 2**30
# The CPU version keeps the GPU challenge's proportions (batch / width = 4, so activations against
# parameters are the same) at a size two cores run in seconds; its budget is derived from the estimate.
CPU_BASE = dict(GPU_BASE, layers=8, width=256, batch=1024, device="cpu")

# What the learner picks, and the grid the best known choice is searched over: the same.
OPTIONS = {
    "precision": {"cuda": ("fp32", "tf32", "amp_bf16"), "cpu": ("fp32", "amp_bf16")},
    "checkpoint": ("none", "per_layer", "segments"),
    "accum": (1, 2, 4),
    "optimizer_impl": ("default", "fused"),
}
CHOICE_FIELDS = tuple(OPTIONS)
# Step times of a few milliseconds vary by about this much between runs of the same code: within it, a
# choice is as fast as the best known.
SPEED_SLACK = 0.10


def options(field: str, device_type: str) -> tuple:
    values = OPTIONS[field]
    return values[device_type] if isinstance(values, dict) else values


def grid(device_type: str) -> list[dict]:
    fields = CHOICE_FIELDS
    return [dict(zip(fields, combo, strict=True))
            for combo in itertools.product(*(options(f, device_type) for f in fields))]


def challenge(device_type: str, estimate) -> dict:
    """The challenge for this device. `estimate(config: dict, device_type: str) -> estimate dict`.

    On a CPU the budget is the GPU budget's share of the GPU baseline's estimated peak, applied to the CPU
    baseline's estimated peak: the same squeeze, at a size that runs in seconds."""
    if device_type == "cuda":
        return {"base": dict(GPU_BASE), "budget": GPU_BUDGET, "scaled": False}
    gpu_peak = estimate(GPU_BASE, "cuda")["peak_bytes"]
    cpu_peak = estimate(CPU_BASE, "cpu")["peak_bytes"]
    share = GPU_BUDGET / gpu_peak
    budget = math.ceil(share * cpu_peak / (MIB / 16)) * (MIB / 16)  # in 1/16 MiB, so the page shows it exactly
    return {"base": dict(CPU_BASE), "budget": int(budget), "scaled": True, "share": share,
            "gpu_peak": gpu_peak, "cpu_peak": cpu_peak}


def config_of(base: dict, choice: dict) -> dict:
    return {**base, **choice}


def best_known(base: dict, budget: int, device_type: str, estimate, step_ms=None, progress=None) -> dict:
    """The fastest choice of the grid whose estimated peak fits the budget.

    Ranked by `step_ms(est, precision)`, the step time predicted from the replay's work and the device's measured
    rates (None where it cannot be predicted); without it, by the work itself (FLOPs, then kernels).
    `estimate(config: dict, device_type) -> estimate dict`."""
    rows = []
    choices = grid(device_type)
    for i, choice in enumerate(choices):
        est = estimate(config_of(base, choice), device_type)
        step = est.get("step") or {}
        rows.append({"choice": choice, "peak_bytes": int(est["peak_bytes"]), "fits": est["peak_bytes"] <= budget,
                     "ms": step_ms(est, choice["precision"]) if step_ms and step else None,
                     "work": (step.get("flops", 0), step.get("kernels", 0))})
        if progress:
            progress(i + 1, len(choices))
    fitting = [r for r in rows if r["fits"]]
    by_time = step_ms is not None and all(r["ms"] is not None for r in fitting)
    fitting.sort(key=(lambda r: (r["ms"], r["peak_bytes"])) if by_time else (lambda r: (r["work"], r["peak_bytes"])))
    best = fitting[0] if fitting else None
    return {"choice": best["choice"] if best else None, "peak_bytes": best["peak_bytes"] if best else None,
            "ms": best["ms"] if best else None, "ranked_by": "time" if by_time else "work",
            "fitting": len(fitting), "considered": len(rows),
            "lowest_peak": min(r["peak_bytes"] for r in rows) if rows else None}


def _median(result: dict | None) -> float | None:
    return ((result or {}).get("step_ms") or {}).get("median")


def assess(candidate: dict, baseline: dict | None, best: dict | None, guard: dict | None, budget: int) -> dict:
    """Fit, correctness and speed of the learner's run; a score out of 100 against the best known choice's run."""
    peak = metrics.net_peak(candidate)
    oom = bool(candidate.get("oom"))
    fit = not oom and peak is not None and peak <= budget
    correct = bool(guard and guard.get("ok"))
    cand_ms, base_ms, best_ms = _median(candidate), _median(baseline), _median(best)
    fast = bool(cand_ms and best_ms and cand_ms <= (1 + SPEED_SLACK) * best_ms)
    checks = {"fit": fit, "correct": correct, "fast": fit and correct and fast}
    score = 0
    if fit and correct and cand_ms and best_ms:
        score = 100 if fast else round(100 * best_ms / cand_ms)
    why = []
    largest = metrics.largest_category(candidate)
    if oom:
        why.append(message("ex2.why.oom"))
    elif not fit and peak is not None:
        why.append(message("ex2.why.over", peak=fmt_bytes(peak), budget=fmt_bytes(budget),
                           over=fmt_bytes(peak - budget), category=largest[0] if largest else "?",
                           size=fmt_bytes(largest[1]) if largest else "—"))
    if guard is None:
        why.append(message("ex2.why.no_guard"))
    elif not correct:
        why.append(message("ex2.why.wrong", rel=f"{guard.get('max_rel_diff', float('nan')):.2e}",
                           tol=f"{guard.get('tolerance', float('nan')):.0e}", precision=guard.get("precision", "?")))
    if cand_ms and base_ms:
        why.append(message("ex2.why.speed", ms=f"{cand_ms:,.2f}", ratio=f"{cand_ms / base_ms:.2f}",
                           base_ms=f"{base_ms:,.2f}"))
    if cand_ms and best_ms and fit and correct and not fast:
        why.append(message("ex2.why.slower", ms=f"{cand_ms:,.2f}", best_ms=f"{best_ms:,.2f}",
                           ratio=f"{cand_ms / best_ms:.2f}"))
    return {"checks": checks, "passed": sum(checks.values()), "score": score, "peak": peak, "why": why,
            "ms": cand_ms, "base_ms": base_ms, "best_ms": best_ms, "solved": all(checks.values())}
