"""Interleaved timing rounds compared round by round: the paired ratio of two strategies, its spread and its verdict.
Torch-free (experiments/measure/timing.py runs the rounds; lessons and the app read the verdict)."""

from __future__ import annotations

import os
import statistics

# Interleaved rounds are compared round by round: in one round both strategies run minutes apart at most, so
# whatever drifts between rounds (clocks, neighbours, the allocator) moves both, and their ratio cancels it.
# Two strategies are told apart only when every round puts them in the same order. Were they equally fast,
# each round would be a coin toss, and n tosses all land the same way 2 times in 2**n: 1 in 16 at 5 rounds,
# 1 in 4 at 3. Fewer rounds than this give no verdict.
VERDICT_MIN_ROUNDS = 5
VERDICTS = ("slower", "faster", "unclear", "too_few")
# What a timing_rounds job takes (experiments/measure/timing.py checks it; exercise 2's settings are read against it).
LIMITS = {"rounds": (2, 10), "steps": (1, 50), "warmup": (0, 10)}


def _round_ms(result: dict, strategy: str) -> list[float] | None:
    rows = [r for r in result.get("strategies") or [] if r.get("id") == strategy]
    return list(rows[0].get("round_ms") or []) if rows else None


def paired_ratios(result: dict, strategy: str, versus: str) -> list[float] | None:
    """Per round of a timing_rounds result: the strategy's median step time over `versus`'s in that round."""
    a, b = _round_ms(result, strategy), _round_ms(result, versus)
    if not a or not b or len(a) != len(b) or any(not ms or ms <= 0 for ms in b):
        return None
    return [x / y for x, y in zip(a, b, strict=True)]


def paired(result: dict, strategy: str, versus: str) -> dict | None:
    """The paired ratio of two strategies over rounds: its median, its range, how many rounds went each way and
    the verdict ("slower" or "faster" when every round of at least VERDICT_MIN_ROUNDS agrees, else "unclear",
    or "too_few" rounds)."""
    ratios = paired_ratios(result, strategy, versus)
    if not ratios:
        return None
    n = len(ratios)
    slower, faster = sum(r > 1 for r in ratios), sum(r < 1 for r in ratios)
    if n < VERDICT_MIN_ROUNDS:
        verdict = "too_few"
    elif slower == n:
        verdict = "slower"
    elif faster == n:
        verdict = "faster"
    else:
        verdict = "unclear"
    return {
        "strategy": strategy,
        "versus": versus,
        "ratios": ratios,
        "median": statistics.median(ratios),
        "lo": min(ratios),
        "hi": max(ratios),
        "rounds": n,
        "slower": slower,
        "faster": faster,
        "verdict": verdict,
    }


def machine_load() -> dict:
    """{"load": runnable threads over the last minute, "cores": the cores this process may use}; load None where the
    system has no figure. Recorded with a timing_rounds result (at its start and its end)."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = None
    return {"load": load, "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()}


def too_busy(result: dict) -> bool:
    """Whether the rounds ran on an oversubscribed machine: more runnable threads than cores at their start or end.
    Interleaving cancels what drifts, not contention that falls unevenly: a choice with more small kernels or more
    Python per step loses more of each core to the other learners' work. A speed verdict from such rounds says more
    about the class than about the choice (exercise 2 graded one answer 100 at load 21 and slower at load 44)."""
    seen = [m for m in (result.get("load_start"), result.get("load_end")) if m and m.get("load") is not None]
    return any(m["load"] > (m.get("cores") or 1) for m in seen)
