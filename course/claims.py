"""Checks a lesson's claim against two measured results (technique vs baseline)."""

from __future__ import annotations

from experiments.core import metrics, named_metrics

# Achieved fp32 TFLOP/s above which a step on an H100/H200-class GPU is limited by arithmetic, not launches.
COMPUTE_BOUND_TFLOPS = 20

# The runs a technique's explanation is checked on: its pair ("run": the technique, "baseline": the configuration
# without it) and, for a time claim, the interleaved rounds of exactly that pair ("rounds"), whose strategies the
# checks name TECHNIQUE and BASELINE whether the rounds are a recorded set's or the learner's own.
ROUNDS = "rounds"
TECHNIQUE, BASELINE = "technique", "baseline"


def measure(metric: str, technique: dict, baseline: dict) -> float | None:
    """peak_saving_pct: % less peak memory than the baseline; step_time_ratio: technique step time / baseline, of
    one pair of runs (a time claim is judged over interleaved rounds: holds_over_rounds)."""
    if technique.get("oom") or baseline.get("oom"):
        return None
    return named_metrics.scalar(metric, technique, baseline)


def holds(value: float | None, claimed_range) -> bool | None:
    if value is None or not claimed_range or len(claimed_range) != 2:
        return None
    lo, hi = claimed_range
    return lo <= value <= hi


def verdict(technique: dict, technique_result: dict, baseline_result: dict, rounds: dict | None = None) -> bool | None:
    """The verdict the page gives a technique: over `rounds` (rounds_pair) for a time claim, since one pair of runs
    judges no time claim; on the pair for a memory claim. None: no verdict, so no explanation is shown."""
    rng = technique.get("claimed_range")
    if technique.get("rounds"):
        summary = metrics.paired(rounds, TECHNIQUE, BASELINE) if rounds else None
        return holds_over_rounds(summary, rng)
    return holds(measure(technique.get("metric", "peak_saving_pct"), technique_result, baseline_result), rng)


def explanation(technique: dict, verdict: bool | None) -> tuple[str | None, list[dict]]:
    """Which of a technique's texts the page shows beside a verdict, and the checks that text makes on the pair
    it is shown with (run keys "run": the technique, "baseline": the configuration without it)."""
    if verdict is None:
        return None, []
    key = "why_holds" if verdict else "why_not"
    return key, list(technique.get(f"{key}_expect") or [])


def runs(technique_result: dict | None, baseline_result: dict | None, rounds: dict | None = None) -> dict[str, dict]:
    """The results an explanation's checks read, by run key; a None is a run the page does not have (a check on it
    is not applied, so the page does not call the text checked)."""
    out = {"run": technique_result, "baseline": baseline_result, ROUNDS: rounds}
    return {k: v for k, v in out.items() if v is not None}


def rounds_pair(result: dict | None, strategy: str, versus: str) -> dict | None:
    """A timing_rounds result narrowed to one technique's pair, `strategy` renamed TECHNIQUE and `versus` BASELINE:
    a recorded set names its strategies by the set's ids, the page's live rounds time "technique" against
    "baseline", and an explanation's checks read both alike. None when the result lacks either."""
    rows = {r.get("id"): r for r in (result or {}).get("strategies") or []}
    if strategy not in rows or versus not in rows:
        return None
    kept = {k: v for k, v in result.items() if k not in ("strategies", "paired")}
    return {**kept, "strategies": [dict(rows[versus], id=BASELINE), dict(rows[strategy], id=TECHNIQUE)]}


def fmt(metric: str, value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:+.1f} %" if metric == "peak_saving_pct" else f"{value:.2f}×"


def fmt_range(metric: str, claimed_range) -> str:
    if not claimed_range or len(claimed_range) != 2:
        return "—"
    lo, hi = claimed_range
    return f"{lo:g}–{hi:g} %" if metric == "peak_saving_pct" else f"{lo:g}–{hi:g}×"


def holds_over_rounds(summary: dict | None, claimed_range) -> bool | None:
    """A time claim against interleaved rounds (experiments.core.metrics.paired): it holds when every round's ratio lies
    in the claimed range, fails when none does; otherwise, or with too few rounds, the rounds cannot decide."""
    if summary is None or not claimed_range or len(claimed_range) != 2:
        return None
    if summary["rounds"] < metrics.VERDICT_MIN_ROUNDS:
        return None
    lo, hi = claimed_range
    inside = [lo <= r <= hi for r in summary["ratios"]]
    if all(inside):
        return True
    if not any(inside):
        return False
    return None


def regime(baseline: dict) -> str | None:
    """Where a speed claim is judged: "compute" when the baseline kept the GPU busy with arithmetic, "launch" when a
    few TFLOP/s say kernel launches bound it; None off a GPU or without the rate."""
    if (baseline.get("device") or {}).get("type") != "cuda" or not baseline.get("tflops"):
        return None
    return "compute" if baseline["tflops"] >= COMPUTE_BOUND_TFLOPS else "launch"
