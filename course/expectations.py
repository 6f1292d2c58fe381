"""Machine-checkable expectations: what a lesson sentence says about a result, as data. Torch-free.

A lesson prompt ("the peak is in optimizer_step", "switching to SGD removes the state") carries a
list of checks. The app evaluates them on the result it shows; the tests evaluate them on every
recorded GPU result and on a CPU run, so prose and data cannot drift apart. Reference:
docs/expectations.md.

A check is a dict: {"check": <type>, ...arguments, "run": <key, default "run">,
"devices": [optional list of device types it applies to]}. `evaluate` takes the results by key:
"run" is the result on the page, "changed" the run after a prompt's suggested change, and on the
comparison page each strategy id names its run.

An outcome's "holds" is True, False, or None when the check could not be evaluated: its run is absent,
its figure is missing from the result, or its `devices` rule skips it ("skipped": "device"), also when its
run is absent because every run shown is on a device the rule excludes. Only the last is a legitimate
non-answer; `unapplied` lists the others, and the tests fail on them.
"""

from __future__ import annotations

from experiments.core import metrics, named_metrics
from experiments.core.units import MIB
from experiments.core.vocabulary import CATEGORIES, PHASES

# A data-parallel rank's categories: the single-device ones and its collectives' buffers.
RANK_CATEGORIES = CATEGORIES + ("communication",)

# What each figure reads is registered once, in experiments/core/named_metrics.py; these sets are read off it.
ONE_RUN_METRICS = set(named_metrics.ONE_RUN)
PAIR_METRICS = set(named_metrics.PAIR)
# Metrics of a timing_rounds result that compare two of its strategies round by round.
ROUNDS_PAIR_METRICS = named_metrics.named("strategy") & named_metrics.named("versus")
CHECKS = (
    "peak_phase",
    "share",
    "phase_growth",
    "step1_le_steady",
    "steady_repeats",
    "reserved_ge_allocated",
    "value",
    "leak_growth",
    "largest_category",
    "breakdown_sums_to_peak",
    "paired_verdict",
)
# Metrics that read a category (or a list of categories, summed) and those that need step and phase.
CATEGORY_METRICS = named_metrics.named("category")
PHASE_METRICS = named_metrics.named("phase")
# What the page prints a MiB figure to (app/frames.fmt_bytes: two decimals): a sum off by less is not visible.
PAGE_ROUNDING_MIB = 0.01


class ExpectationError(ValueError):
    """A malformed check in a lesson's meta.json."""


def _categories_ok(value, allowed=CATEGORIES) -> bool:
    names = [value] if isinstance(value, str) else value
    return isinstance(names, list) and bool(names) and all(n in allowed for n in names)


def validate(check: dict) -> None:
    if not isinstance(check, dict) or check.get("check") not in CHECKS:
        raise ExpectationError(f"unknown check {check!r}; known: {', '.join(CHECKS)}")
    kind = check["check"]
    if kind == "peak_phase" and not (check.get("is") and set(check["is"]) <= set(PHASES)):
        raise ExpectationError(f"peak_phase.is must list phases of {PHASES}: {check!r}")
    if kind == "largest_category" and not (check.get("is") and _categories_ok(check["is"])):
        raise ExpectationError(f"largest_category.is must list categories of {CATEGORIES}: {check!r}")
    if kind == "share" and not _categories_ok(check.get("category")):
        raise ExpectationError(f"share.category must be one of {CATEGORIES} or a list of them: {check!r}")
    if kind == "breakdown_sums_to_peak" and check.get("source", "measured") not in ("measured", "estimated"):
        raise ExpectationError(f"breakdown_sums_to_peak.source must be measured or estimated: {check!r}")
    if kind == "phase_growth" and (check.get("phase") not in PHASES or not isinstance(check.get("step"), int)):
        raise ExpectationError(f"phase_growth needs an int step and a phase: {check!r}")
    if kind == "value":
        metric = check.get("metric")
        if metric not in ONE_RUN_METRICS | PAIR_METRICS:
            raise ExpectationError(f"unknown metric {metric!r} in {check!r}")
        if metric in PAIR_METRICS and not check.get("baseline"):
            raise ExpectationError(f"{metric} compares two runs: give 'baseline': {check!r}")
        if metric == "saving_ratio" and not (check.get("versus") and check.get("versus_baseline")):
            raise ExpectationError(f"saving_ratio compares two savings: give 'versus' and 'versus_baseline': {check!r}")
        if metric == "phase_peak_ratio" and not all(k in check for k in ("step", "phase", "versus_step")):
            raise ExpectationError(f"phase_peak_ratio needs step, phase and versus_step: {check!r}")
        if metric.startswith("profile_") and not isinstance(check.get("row"), str):
            raise ExpectationError(f"{metric} names the profiler row it reads: give 'row': {check!r}")
        if metric in ROUNDS_PAIR_METRICS and not (check.get("strategy") and check.get("versus")):
            raise ExpectationError(
                f"{metric} pairs two strategies of a rounds result: give 'strategy' and 'versus': {check!r}"
            )
        if metric in PHASE_METRICS and not (isinstance(check.get("step"), int) and check.get("phase") in PHASES):
            raise ExpectationError(f"{metric} needs an int step and a phase of {PHASES}: {check!r}")
        if metric in ("phase_peak_ratio", "phase_peak_gap_params") and not isinstance(check.get("versus_step"), int):
            raise ExpectationError(f"{metric} needs an int versus_step: {check!r}")
        if metric in CATEGORY_METRICS and not _categories_ok(check.get("category"), RANK_CATEGORIES):
            raise ExpectationError(f"{metric} needs a category (or a list of them): {check!r}")
        if metric == "category_per" and not _categories_ok(check.get("per"), RANK_CATEGORIES):
            raise ExpectationError(f"category_per needs 'per', the category it counts in: {check!r}")
        if metric == "profile_params" and (not check.get("row") or check.get("column") not in metrics.PROFILE_COLUMNS):
            raise ExpectationError(
                f"profile_params needs a row and a column of {sorted(metrics.PROFILE_COLUMNS)}: {check!r}"
            )
        missing = [n for n in named_metrics.REGISTRY[metric].needs if check.get(n) is None]
        if missing:
            raise ExpectationError(f"{metric} needs {', '.join(missing)}: {check!r}")
    if kind == "paired_verdict":
        if not (check.get("strategy") and check.get("versus")):
            raise ExpectationError(f"paired_verdict needs 'strategy' and 'versus': {check!r}")
        if not check.get("is") or not set(check["is"]) <= set(metrics.VERDICTS):
            raise ExpectationError(f"paired_verdict.is must list verdicts of {metrics.VERDICTS}: {check!r}")
    if kind in ("share", "phase_growth", "value", "leak_growth") and "min" not in check and "max" not in check:
        raise ExpectationError(f"{kind} needs min and/or max: {check!r}")


# The arguments of a "value" check that its metric reads (besides the runs).
METRIC_ARGS = tuple(sorted({n for x in named_metrics.REGISTRY.values() for n in x.needs} - {"versus_baseline"}))


def _within(value, check: dict) -> bool:
    lo, hi = check.get("min"), check.get("max")
    return (lo is None or value >= lo) and (hi is None or value <= hi)


def _outcome(check: dict, holds, actual=None, **extra) -> dict:
    return {"check": check["check"], "holds": holds, "actual": actual, "spec": check, **extra}


def evaluate_one(check: dict, runs: dict[str, dict]) -> dict:
    """{"check", "holds" (True, False, or None when it could not be evaluated), "actual", "spec", ...}; a None
    carries "skipped": "device" when the check's devices rule excludes the run, "missing" when a run is absent."""
    validate(check)
    result = runs.get(check.get("run", "run"))
    devices = check.get("devices")
    if result is None:
        # A run that exists only on another device (a GPU-only strategy beside CPU runs) is absent by design: when
        # every run shown is on a device the check excludes, it is skipped as it would be with its run.
        shown = {metrics.device_type(r) for r in runs.values() if r is not None}
        if devices and shown and not shown & set(devices):
            return _outcome(check, None, skipped="device")
        return _outcome(check, None, missing=check.get("run", "run"))
    if devices and metrics.device_type(result) not in devices:
        return _outcome(check, None, skipped="device")
    kind = check["check"]
    if kind == "peak_phase":
        phase = metrics.peak_phase(result)
        if phase is None:
            return _outcome(check, None)
        largest = metrics.largest_category(result)
        return _outcome(
            check, phase in check["is"], phase, step=(result.get("peak_phase") or {}).get("step"), largest=largest
        )
    if kind == "share":
        share = metrics.category_share(result, check["category"])
        return _outcome(check, None if share is None else _within(share, check), share)
    if kind == "largest_category":
        largest = metrics.largest_category(result)
        if largest is None:
            return _outcome(check, None)
        return _outcome(check, largest[0] in check["is"], largest[0], size=largest[1])
    if kind == "breakdown_sums_to_peak":
        gap = metrics.breakdown_gap(result, check.get("source", "measured"))
        if gap is None:
            return _outcome(check, None)
        limit = check.get("within_mib", PAGE_ROUNDING_MIB)
        return _outcome(check, abs(gap) / MIB <= limit, gap / MIB)
    if kind == "phase_growth":
        growth = metrics.phase_growth(result, check["step"], check["phase"])
        params = metrics.parameter_bytes(result)
        if growth is None or not params:
            return _outcome(check, None)
        ratio = growth / params
        return _outcome(check, _within(ratio, check), ratio)
    if kind == "step1_le_steady":
        first, steady = metrics.step_peak(result, 1), metrics.step_peak(result, 2)
        if first is None or steady is None:
            return _outcome(check, None)
        return _outcome(check, first <= steady, first, steady=steady)
    if kind == "steady_repeats":
        same = metrics.steady_steps_repeat(result)
        return _outcome(check, same, same)
    if kind == "reserved_ge_allocated":
        rows = [p for p in result.get("phases") or [] if p.get("reserved_bytes") is not None]
        if not rows:
            return _outcome(check, None, skipped="device")
        worst = min(p["reserved_bytes"] - p["allocated_bytes"] for p in rows)
        return _outcome(check, worst >= 0, worst)
    if kind == "leak_growth":
        growth, unit = metrics.leak_growth(result), metrics.output_bytes(result)
        if growth is None or not unit:
            return _outcome(check, None)
        return _outcome(check, _within(growth / unit, check), growth / unit, growth_bytes=growth)
    if kind == "paired_verdict":
        summary = metrics.paired(result, check["strategy"], check["versus"])
        if summary is None:
            return _outcome(check, None)
        return _outcome(check, summary["verdict"] in check["is"], summary["verdict"], paired=summary)
    # "value": one named figure, of one run or of a run against a baseline run
    args = {k: check[k] for k in METRIC_ARGS if k in check}
    baseline = runs.get(check["baseline"]) if check.get("baseline") else None
    if check.get("baseline") and baseline is None:
        return _outcome(check, None, missing=check["baseline"])
    if check["metric"] == "saving_ratio":
        other, other_base = runs.get(check["versus"]), runs.get(check["versus_baseline"])
        if other is None or other_base is None:
            return _outcome(check, None, missing=check["versus"] if other is None else check["versus_baseline"])
        args = {"versus": other, "versus_baseline": other_base}
    value = named_metrics.scalar(check["metric"], result, baseline, **args)
    return _outcome(check, None if value is None else _within(value, check), value)


def evaluate(checks: list[dict], runs: dict[str, dict]) -> list[dict]:
    return [evaluate_one(c, runs) for c in checks or []]


def unapplied(outcomes: list[dict]) -> list[dict]:
    """Outcomes that could not be evaluated for a reason other than their devices rule: a missing run or figure.
    A sentence whose check has nothing to read is not backed by anything, so the tests fail on these."""
    return [o for o in outcomes if o["holds"] is None and o.get("skipped") != "device"]


def verdict(outcomes: list[dict]) -> bool | None:
    """False when a check fails; True when every check holds or is skipped by its devices rule (at least one
    holding); None otherwise: nothing applied, or a check could not be evaluated, so nothing was confirmed."""
    if any(o["holds"] is False for o in outcomes):
        return False
    if unapplied(outcomes) or not any(o["holds"] for o in outcomes):
        return None
    return True
