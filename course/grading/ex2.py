"""Exercise 2, graded: a memory budget challenge. Fit (measured), speed (measured against the unoptimized
baseline and the best known choice) and gradient correctness (the guard), scored against the best known
choice, which the estimator finds over the same option grid the learner picks from."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from course.grading.common import SettingsError, message, number, section
from course.units import MIB, fmt_bytes
from experiments.core import metrics
from experiments.core.config import CHOICES, RANGES, ConfigError, ExperimentConfig

CHECKS = ("fit", "correct", "fast")
DEVICE_TYPES = ("cuda", "cpu")


@dataclass(frozen=True)
class Settings:
    """The exercise's settings (its meta.json "grading"): the GPU challenge (the preset with its changes, in a
    budget), the CPU version of it, the options the learner picks from, and the speed slack."""

    gpu_base: dict
    gpu_budget: int
    cpu_base: dict
    options: dict  # field -> values, or {device type: values}: what the learner picks and the best is searched over
    speed_slack: float  # step times this close to the best known choice's count as as fast

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(self.options)

    @property
    def total(self) -> int:
        return len(CHECKS)


def _config(meta: dict, name: str, data: dict) -> dict:
    """`data`, once the engine's rules accept it as a configuration."""
    try:
        ExperimentConfig.from_dict(data)
    except (ConfigError, TypeError) as exc:
        raise SettingsError(f"{meta.get('id', '?')}/meta.json grading.{name}: {exc}") from None
    return data


def _values(meta: dict, field: str, values) -> tuple:
    """A list of values the learner may pick for a configuration field: its choices, or integers in its range."""
    if field in CHOICES:
        allowed, said = CHOICES[field], ", ".join(CHOICES[field])
    elif field in RANGES:
        (lo, hi), said = RANGES[field], "integers in [{}, {}]".format(*RANGES[field])
        allowed = range(lo, hi + 1)
    else:
        allowed, said = (), "nothing: not a field the learner picks from a list"
    if not isinstance(values, list) or not values or any(isinstance(v, bool) or v not in allowed for v in values):
        raise SettingsError(f"{meta.get('id', '?')}/meta.json grading.options.{field}: got {values!r}; allowed: {said}")
    return tuple(values)


def settings(meta: dict) -> Settings:
    g = section(meta)
    gpu, cpu = g.get("gpu") or {}, g.get("cpu") or {}
    gpu_base = _config(meta, "gpu.config", {**(meta.get("preset") or {}), **(gpu.get("config") or {})})
    cpu_base = _config(meta, "cpu.config", {**gpu_base, **(cpu.get("config") or {})})
    options = {}
    for field, values in (g.get("options") or {}).items():
        if isinstance(values, dict):
            if set(values) != set(DEVICE_TYPES):
                raise SettingsError(
                    f"{meta.get('id', '?')}/meta.json grading.options.{field}: per device, give "
                    f"exactly {', '.join(DEVICE_TYPES)}"
                )
            options[field] = {d: _values(meta, field, values[d]) for d in DEVICE_TYPES}
        else:
            options[field] = _values(meta, field, values)
    if not options:
        raise SettingsError(f"{meta.get('id', '?')}/meta.json grading.options: no option for the learner to pick")
    return Settings(
        gpu_base=gpu_base,
        gpu_budget=int(number(gpu, "budget_mib", 1, 10**7, meta) * MIB),
        cpu_base=cpu_base,
        options=options,
        speed_slack=number(g, "speed_slack", 0.0, 1.0, meta),
    )


def options(s: Settings, field: str, device_type: str) -> tuple:
    values = s.options[field]
    return values[device_type] if isinstance(values, dict) else values


def grid(s: Settings, device_type: str) -> list[dict]:
    """Every combination of the options: what the learner picks from and the best known choice is searched over."""
    return [
        dict(zip(s.fields, combo, strict=True))
        for combo in itertools.product(*(options(s, f, device_type) for f in s.fields))
    ]


def challenge(s: Settings, device_type: str, estimate) -> dict:
    """The challenge for this device. `estimate(config: dict, device_type: str) -> estimate dict`.

    On a CPU the budget is the GPU budget's share of the GPU baseline's estimated peak, applied to the CPU
    baseline's estimated peak: the same squeeze, at a size that runs in seconds."""
    if device_type == "cuda":
        return {"base": dict(s.gpu_base), "budget": s.gpu_budget, "scaled": False}
    gpu_peak = estimate(s.gpu_base, "cuda")["peak_bytes"]
    cpu_peak = estimate(s.cpu_base, "cpu")["peak_bytes"]
    share = s.gpu_budget / gpu_peak
    budget = math.ceil(share * cpu_peak / (MIB / 16)) * (MIB / 16)  # in 1/16 MiB, so the page shows it exactly
    return {
        "base": dict(s.cpu_base),
        "budget": int(budget),
        "scaled": True,
        "share": share,
        "gpu_peak": gpu_peak,
        "cpu_peak": cpu_peak,
    }


def config_of(base: dict, choice: dict) -> dict:
    return {**base, **choice}


def best_known(s: Settings, base: dict, budget: int, device_type: str, estimate, step_ms=None, progress=None) -> dict:
    """The fastest choice of the grid whose estimated peak fits the budget.

    Ranked by `step_ms(est, precision)`, the step time predicted from the replay's work and the device's measured
    rates (None where it cannot be predicted); without it, by the work itself (FLOPs, then kernels).
    `estimate(config: dict, device_type) -> estimate dict`."""
    rows = []
    choices = grid(s, device_type)
    for i, choice in enumerate(choices):
        est = estimate(config_of(base, choice), device_type)
        step = est.get("step") or {}
        rows.append(
            {
                "choice": choice,
                "peak_bytes": int(est["peak_bytes"]),
                "fits": est["peak_bytes"] <= budget,
                "ms": step_ms(est, choice["precision"]) if step_ms and step else None,
                "work": (step.get("flops", 0), step.get("kernels", 0)),
            }
        )
        if progress:
            progress(i + 1, len(choices))
    fitting = [r for r in rows if r["fits"]]
    by_time = step_ms is not None and all(r["ms"] is not None for r in fitting)
    fitting.sort(key=(lambda r: (r["ms"], r["peak_bytes"])) if by_time else (lambda r: (r["work"], r["peak_bytes"])))
    best = fitting[0] if fitting else None
    return {
        "choice": best["choice"] if best else None,
        "peak_bytes": best["peak_bytes"] if best else None,
        "ms": best["ms"] if best else None,
        "ranked_by": "time" if by_time else "work",
        "fitting": len(fitting),
        "considered": len(rows),
        "lowest_peak": min(r["peak_bytes"] for r in rows) if rows else None,
    }


def _median(result: dict | None) -> float | None:
    return ((result or {}).get("step_ms") or {}).get("median")


def assess(
    s: Settings, candidate: dict, baseline: dict | None, best: dict | None, guard: dict | None, budget: int
) -> dict:
    """Fit, correctness and speed of the learner's run; a score out of 100 against the best known choice's run."""
    peak = metrics.net_peak(candidate)
    oom = bool(candidate.get("oom"))
    fit = not oom and peak is not None and peak <= budget
    correct = bool(guard and guard.get("ok"))
    cand_ms, base_ms, best_ms = _median(candidate), _median(baseline), _median(best)
    fast = bool(cand_ms and best_ms and cand_ms <= (1 + s.speed_slack) * best_ms)
    checks = dict(zip(CHECKS, (fit, correct, fit and correct and fast), strict=True))
    score = 0
    if fit and correct and cand_ms and best_ms:
        score = 100 if fast else round(100 * best_ms / cand_ms)
    why = []
    largest = metrics.largest_category(candidate)
    if oom:
        why.append(message("ex2.why.oom"))
    elif not fit and peak is not None:
        why.append(
            message(
                "ex2.why.over",
                peak=fmt_bytes(peak),
                budget=fmt_bytes(budget),
                over=fmt_bytes(peak - budget),
                category=largest[0] if largest else "?",
                size=fmt_bytes(largest[1]) if largest else "—",
            )
        )
    if guard is None:
        why.append(message("ex2.why.no_guard"))
    elif not correct:
        why.append(
            message(
                "ex2.why.wrong",
                rel=f"{guard.get('max_rel_diff', float('nan')):.2e}",
                tol=f"{guard.get('tolerance', float('nan')):.0e}",
                precision=guard.get("precision", "?"),
            )
        )
    if cand_ms and base_ms:
        why.append(
            message("ex2.why.speed", ms=f"{cand_ms:,.2f}", ratio=f"{cand_ms / base_ms:.2f}", base_ms=f"{base_ms:,.2f}")
        )
    if cand_ms and best_ms and fit and correct and not fast:
        why.append(
            message("ex2.why.slower", ms=f"{cand_ms:,.2f}", best_ms=f"{best_ms:,.2f}", ratio=f"{cand_ms / best_ms:.2f}")
        )
    return {
        "checks": checks,
        "passed": sum(checks.values()),
        "score": score,
        "peak": peak,
        "why": why,
        "ms": cand_ms,
        "base_ms": base_ms,
        "best_ms": best_ms,
        "solved": all(checks.values()),
    }
