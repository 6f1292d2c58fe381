"""Numbers that lesson prose quotes, computed from the results the project recorded. Torch-free.

A lesson's meta.json names each number once under "facts":
    "amp_small_ratio": {"metric": "step_time_ratio", "run": "optimization-amp_bf16-config",
                        "baseline": "optimization-amp_bf16-baseline", "format": ".2f", "min": 1.05}
and its Markdown writes {{amp_small_ratio}} where the number goes. The value is always the recorded
one, and min/max pin the direction the sentence around it states (a test fails when a re-recording
turns "slower" into "faster").
"""

from __future__ import annotations

import re

from . import metrics
from .expectations import METRIC_ARGS, ONE_RUN_METRICS, PAIR_METRICS

PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z0-9_.]+)\s*\}\}")


class FactError(ValueError):
    pass


def value(spec: dict, load) -> float | None:
    """The fact's number; `load(recorded_id)` returns a recorded result or None."""
    metric = spec.get("metric")
    if metric not in ONE_RUN_METRICS | PAIR_METRICS:
        raise FactError(f"unknown metric {metric!r}")
    result = load(spec.get("run"))
    if result is None:
        return None
    baseline = None
    if metric in PAIR_METRICS:
        baseline = load(spec.get("baseline"))
        if baseline is None:
            return None
    args = {k: spec[k] for k in METRIC_ARGS if k in spec}
    return metrics.scalar(metric, result, baseline, **args)


def holds(spec: dict, number: float | None) -> bool:
    if number is None:
        return False
    lo, hi = spec.get("min"), spec.get("max")
    return (lo is None or number >= lo) and (hi is None or number <= hi)


def formatted(spec: dict, number: float | None) -> str:
    if number is None:
        return "—"
    fmt = spec.get("format", ".1f")
    return format(number, fmt)


def resolve(facts: dict, load) -> dict[str, str]:
    return {name: formatted(spec, value(spec, load)) for name, spec in (facts or {}).items()}


def render(text: str, values: dict[str, str]) -> str:
    """Replaces {{name}}; an unknown name stays visible as-is so a missing fact is noticed, not hidden."""
    return PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), text)


def placeholders(text: str) -> set[str]:
    return set(PLACEHOLDER.findall(text))
