"""Machine-checkable expectations: what a lesson sentence says about a result, as data. Torch-free.

A lesson prompt ("the peak is in optimizer_step", "switching to SGD removes the state") carries a
list of checks. The app evaluates them on the result it shows; the tests evaluate them on every
recorded GPU result and on a CPU run, so prose and data cannot drift apart. Reference:
docs/expectations.md.

A check is a dict: {"check": <type>, ...arguments, "run": <key, default "run">,
"devices": [optional list of device types it applies to]}. `evaluate` takes the results by key:
"run" is the result on the page, "changed" the run after a prompt's suggested change, and on the
comparison page each strategy id names its run.
"""

from __future__ import annotations

from . import metrics
from .vocabulary import CATEGORIES, PHASES  # noqa: F401 - the names checks may use

ONE_RUN_METRICS = {
    "net_peak_mib", "peak_mib", "baseline_mib", "parameters_mib", "category_mib", "category_share_pct",
    "phase_peak_mib", "phase_growth_mib", "step_ms", "step_spread_pct", "tflops", "leak_growth_bytes",
    "leak_growth_kib", "frag_unallocated_mib", "frag_reserved_mib", "frag_allocated_mib", "round_median_ms",
    "round_spread_pct", "round_separation_pct", "phase_peak_ratio", *metrics.PAIRED_FIELDS,
    "frag_larger_fits", "host_mib", "driver_outside_mib", "leak_gc_freed_kib", "gc_freed_per_step",
    "state_bytes_per_param", "profile_self_mib", "profile_total_mib",
}
# Metrics of a timing_rounds result that compare two of its strategies round by round.
ROUNDS_PAIR_METRICS = {*metrics.PAIRED_FIELDS, "round_separation_pct"}
PAIR_METRICS = {"peak_saving_pct", "peak_ratio", "saved_mib", "step_time_ratio", "category_ratio", "saving_ratio"}
CHECKS = ("peak_phase", "share", "phase_growth", "step1_le_steady", "steady_repeats", "reserved_ge_allocated",
          "value", "leak_growth", "paired_verdict")


class ExpectationError(ValueError):
    """A malformed check in a lesson's meta.json."""


def validate(check: dict) -> None:
    if not isinstance(check, dict) or check.get("check") not in CHECKS:
        raise ExpectationError(f"unknown check {check!r}; known: {', '.join(CHECKS)}")
    kind = check["check"]
    if kind == "peak_phase" and not set(check.get("is") or ()) <= set(PHASES):
        raise ExpectationError(f"peak_phase.is must list phases of {PHASES}: {check!r}")
    if kind in ("share",) and check.get("category") not in CATEGORIES:
        raise ExpectationError(f"{kind}.category must be one of {CATEGORIES}: {check!r}")
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
            raise ExpectationError(f"{metric} pairs two strategies of a rounds result: give 'strategy' and "
                                   f"'versus': {check!r}")
    if kind == "paired_verdict":
        if not (check.get("strategy") and check.get("versus")):
            raise ExpectationError(f"paired_verdict needs 'strategy' and 'versus': {check!r}")
        if not check.get("is") or not set(check["is"]) <= set(metrics.VERDICTS):
            raise ExpectationError(f"paired_verdict.is must list verdicts of {metrics.VERDICTS}: {check!r}")
    if kind in ("share", "phase_growth", "value", "leak_growth") and "min" not in check and "max" not in check:
        raise ExpectationError(f"{kind} needs min and/or max: {check!r}")


def _within(value, check: dict) -> bool:
    lo, hi = check.get("min"), check.get("max")
    return (lo is None or value >= lo) and (hi is None or value <= hi)


def _outcome(check: dict, holds, actual=None, **extra) -> dict:
    return {"check": check["check"], "holds": holds, "actual": actual, "spec": check, **extra}


def evaluate_one(check: dict, runs: dict[str, dict]) -> dict:
    """{"check", "holds" (True, False, or None when it does not apply), "actual", "spec", ...}."""
    validate(check)
    result = runs.get(check.get("run", "run"))
    if result is None:
        return _outcome(check, None)
    devices = check.get("devices")
    if devices and metrics.device_type(result) not in devices:
        return _outcome(check, None, skipped="device")
    kind = check["check"]
    if kind == "peak_phase":
        phase = metrics.peak_phase(result)
        if phase is None:
            return _outcome(check, None)
        largest = metrics.largest_category(result)
        return _outcome(check, phase in check["is"], phase, step=(result.get("peak_phase") or {}).get("step"),
                        largest=largest)
    if kind == "share":
        share = metrics.category_share(result, check["category"])
        return _outcome(check, None if share is None else _within(share, check), share)
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
    args = {k: check[k] for k in ("category", "step", "phase", "strategy", "versus", "versus_step", "row") if k in check}
    baseline = runs.get(check["baseline"]) if check.get("baseline") else None
    if check.get("baseline") and baseline is None:
        return _outcome(check, None)
    if check["metric"] == "saving_ratio":
        other, other_base = runs.get(check["versus"]), runs.get(check["versus_baseline"])
        if other is None or other_base is None:
            return _outcome(check, None)
        args = {"versus": other, "versus_baseline": other_base}
    value = metrics.scalar(check["metric"], result, baseline, **args)
    return _outcome(check, None if value is None else _within(value, check), value)


def evaluate(checks: list[dict], runs: dict[str, dict]) -> list[dict]:
    return [evaluate_one(c, runs) for c in checks or []]


def verdict(outcomes: list[dict]) -> bool | None:
    """True when every applicable check holds, False when one fails, None when none applied."""
    applied = [o["holds"] for o in outcomes if o["holds"] is not None]
    if not applied:
        return None
    return all(applied)
