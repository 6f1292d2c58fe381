"""Numbers that lesson prose quotes, computed from the results the project recorded. Torch-free.

A lesson's meta.json names each number once under "facts":
    "amp_small_ratio": {"metric": "peak_ratio", "run": "optimization-amp_bf16-config",
                        "baseline": "optimization-amp_bf16-baseline", "format": ".2f", "max": 0.95}
and its Markdown writes {{amp_small_ratio}} where the number goes. The value is always the recorded
one, and min/max pin the direction the sentence around it states (a test fails when a re-recording
turns "smaller" into "larger").

A time ratio is never read off one pair of runs: it is a paired ratio over interleaved rounds,
    "amp_time": {"metric": "paired_ratio", "run": "exercise2-rounds-b32", "strategy": "amp_bf16",
                 "versus": "fp32", "format": ".1f", "min": 1.0}
{{amp_time}} is the median of the per-round ratios and {{amp_time.lo}}, {{amp_time.hi}} and
{{amp_time.rounds}} its spread, so prose reads "about {{amp_time}}x (between {{amp_time.lo}}x and
{{amp_time.hi}}x over {{amp_time.rounds}} rounds)". min/max then hold for every round, not just the
median: "slower" (min 1.0) means slower in every round.
"""

from __future__ import annotations

import re

from course.expectations import METRIC_ARGS, ONE_RUN_METRICS, PAIR_METRICS
from experiments.core import metrics, named_metrics

PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z0-9_.]+)\s*\}\}")


class FactError(ValueError):
    pass


PAIRED = "paired_ratio"
SPREAD = ("lo", "hi", "rounds")  # the sub-names a paired fact adds: {{name.lo}}, {{name.hi}}, {{name.rounds}}


def value(spec: dict, load) -> float | None:
    """The fact's number; `load(recorded_id)` returns a recorded result or None."""
    metric = spec.get("metric")
    if metric not in ONE_RUN_METRICS | PAIR_METRICS:
        raise FactError(f"unknown metric {metric!r}")
    result = load(spec.get("run"))
    if result is not None and spec.get("allocator"):
        result = (result.get("runs") or {}).get(spec["allocator"])  # one allocator setting of a fragmentation run
    if result is None:
        return None
    baseline = None
    if metric in PAIR_METRICS:
        baseline = load(spec.get("baseline"))
        if baseline is None:
            return None
    args = {k: spec[k] for k in METRIC_ARGS if k in spec}
    return named_metrics.scalar(metric, result, baseline, **args)


def paired_summary(spec: dict, load) -> dict | None:
    """A paired fact's ratio over rounds (metrics.paired), or None for other facts and unrecorded rounds."""
    if spec.get("metric") != PAIRED:
        return None
    result = load(spec.get("run"))
    return None if result is None else metrics.paired(result, spec.get("strategy"), spec.get("versus"))


def holds(spec: dict, number: float | None, summary: dict | None = None) -> bool:
    """Is the number in the fact's range? A paired fact holds only if every round's ratio is (pass `summary`)."""
    if number is None:
        return False
    lo, hi = spec.get("min"), spec.get("max")
    if spec.get("metric") == PAIRED:
        if summary is None:
            return False
        return (lo is None or summary["lo"] >= lo) and (hi is None or summary["hi"] <= hi)
    return (lo is None or number >= lo) and (hi is None or number <= hi)


def names(facts: dict) -> set[str]:
    """Every placeholder the facts define: their names, and a paired fact's spread."""
    out = set(facts or {})
    for name, spec in (facts or {}).items():
        if spec.get("metric") == PAIRED:
            out |= {f"{name}.{part}" for part in SPREAD}
    return out


def formatted(spec: dict, number: float | None) -> str:
    if number is None:
        return "—"
    fmt = spec.get("format", ".1f")
    text = format(number, fmt)
    # A value that rounds to zero is not negative: "-0.00 %" reads as a direction the data does not have.
    return text[1:] if text.startswith("-") and not any(c in "123456789" for c in text) else text


def resolve(facts: dict, load) -> dict[str, str]:
    out = {}
    for name, spec in (facts or {}).items():
        out[name] = formatted(spec, value(spec, load))
        if spec.get("metric") == PAIRED:
            summary = paired_summary(spec, load)
            out[f"{name}.lo"] = formatted(spec, summary and summary["lo"])
            out[f"{name}.hi"] = formatted(spec, summary and summary["hi"])
            out[f"{name}.rounds"] = str(summary["rounds"]) if summary else "—"
    return out


def render(text: str, values: dict[str, str]) -> str:
    """Replaces {{name}}; an unknown name stays visible as-is so a missing fact is noticed, not hidden."""
    return PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), text)


def placeholders(text: str) -> set[str]:
    return set(PLACEHOLDER.findall(text))


def model_facts(meta: dict, value, summary=None) -> dict[str, str]:
    """A model lesson's {{facts}} (meta.json "model_facts"), each spec's number from `value(spec)`, formatted; a paired
    fact's spread ({{name.lo}}, {{name.hi}}, {{name.rounds}}) from `summary(spec)` (None where not recorded)."""
    out = {}
    for name, spec in (meta.get("model_facts") or {}).items():
        out[name] = formatted(spec, value(spec))
        if spec.get("metric") == PAIRED:
            s = summary(spec) if summary else None
            out[f"{name}.lo"] = formatted(spec, s and s["lo"])
            out[f"{name}.hi"] = formatted(spec, s and s["hi"])
            out[f"{name}.rounds"] = str(s["rounds"]) if s else "—"
    return out


def model_verdicts(meta: dict, value, summary=None) -> dict[str, bool | None]:
    """Each model fact: True where it holds on its data (a paired fact: in every round), False where the data says
    otherwise, None where not recorded (`value(spec)` is None)."""
    out = {}
    for name, spec in (meta.get("model_facts") or {}).items():
        number = value(spec)
        paired = summary(spec) if summary and spec.get("metric") == PAIRED else None
        out[name] = None if number is None else holds(spec, number, paired)
    return out
