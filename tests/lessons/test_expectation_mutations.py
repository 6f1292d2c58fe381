"""Mutations of the shipped H200 data, in memory: a recording changed so that a sentence is wrong makes that
sentence's check fail (the optimization page's explanations, the lessons' prompts and their quoted facts)."""

from __future__ import annotations

import copy

import pytest

from course import catalog, claims, content, expectations, facts, recordings
from experiments.core import metrics
from experiments.core.recorded import load_recorded


def _recorded(rid: str) -> dict:
    return copy.deepcopy(load_recorded(rid))


def _technique(tid: str) -> dict:
    return {t["id"]: t for t in content.meta("optimization")["techniques"]}[tid]


def _shown(tid: str, tech: dict, base: dict, rounds: dict | None = None) -> tuple[str, list[dict]]:
    """The explanation the optimization page shows beside the verdict on this data (a time claim's: on its
    rounds, claims.rounds_pair), with its outcomes."""
    technique = _technique(tid)
    key, checks = claims.explanation(technique, claims.verdict(technique, tech, base, rounds))
    return key, expectations.evaluate(checks, claims.runs(tech, base, rounds=rounds))


def _recorded_rounds_pair(tid: str) -> dict:
    ref, rset = content.technique_rounds(content.meta("optimization"), _technique(tid))
    return claims.rounds_pair(
        _recorded(catalog.rounds_set_id("optimization", rset["id"])), ref["strategy"], ref["versus"]
    )


def _slow_strategy(rounds: dict, strategy: str, factor: float) -> None:
    """Every round of one strategy of a rounds result `factor` times slower."""
    row = next(r for r in rounds["strategies"] if r["id"] == strategy)
    row["round_ms"] = [ms * factor for ms in row["round_ms"]]
    for key in ("median_ms", "min_ms", "max_ms"):
        row[key] *= factor


# --- mutations: the shipped data changed so that a sentence is wrong, and that sentence's check fails ---


def test_inplace_relu_saving_thirty_percent_fails_the_shown_explanation():
    base = _recorded("optimization-inplace-baseline")
    tech = _recorded("optimization-inplace-config")
    assert _shown("inplace", tech, base)[0] == "why_not"
    net = metrics.net_peak(base)
    tech["peak_bytes"] = tech["baseline_bytes"] + int(net * 0.7)
    key, outcomes = _shown("inplace", tech, base)
    assert key == "why_holds"  # the verdict flipped: the page now explains why in-place ReLU helps...
    assert expectations.verdict(outcomes) is False  # ...and the explanation's own check says this pair cannot


def test_accumulation_costing_29_percent_more_time_fails_the_shown_explanation():
    """In the rounds that judge it, accumulation costs 1.29x in every round: still outside the claim's 0.9-1.1x,
    so the page keeps its "why not", whose "several times as long, in every round" those rounds contradict."""
    base = _recorded("optimization-accumulation_speed-baseline")
    tech = _recorded("optimization-accumulation_speed-config")
    rounds = _recorded_rounds_pair("accumulation_speed")
    assert expectations.verdict(_shown("accumulation_speed", tech, base, rounds)[1]) is True
    assert metrics.paired(rounds, claims.TECHNIQUE, claims.BASELINE)["lo"] > 2  # as recorded: several times as long
    baseline, technique = rounds["strategies"]
    technique["round_ms"] = [ms * 1.29 for ms in baseline["round_ms"]]
    key, outcomes = _shown("accumulation_speed", tech, base, rounds)
    assert key == "why_not"
    assert [o["spec"]["metric"] for o in outcomes if o["holds"] is False] == ["paired_ratio_lo"]


def test_positive_optimizer_rows_fail_the_profiler_bullets():
    profile = _recorded("analysis-profile")
    checks = content.meta("analysis")["profile_expect"]
    assert expectations.verdict(expectations.evaluate(checks, {"run": profile})) is True
    for row in profile["rows"]:
        if row["name"].startswith("Optimizer."):
            for key in ("self_device_memory_bytes", "device_memory_bytes"):
                row[key] = abs(row[key])
    failed = [o["spec"]["row"] for o in expectations.evaluate(checks, {"run": profile}) if o["holds"] is False]
    assert failed == ["Optimizer.zero_grad", "Optimizer.step"]


def _prompt_outcomes(lesson: str, kind: str, field: str, runs: dict) -> list[dict]:
    return expectations.evaluate(content.meta(lesson)["prompts"][kind][field], runs)


def _prompt_runs(lesson: str, kind: str) -> dict:
    return {key: _recorded(rid) for key, rid in recordings.prompt_recorded_ids(lesson, kind).items()}


def _scale_phase_peak(run: dict, step: int, phase: str, factor: float) -> None:
    for p in run["phases"]:
        if p["step"] == step and p["phase"] == phase:
            p["peak_bytes"] = run["baseline_bytes"] + int((p["peak_bytes"] - run["baseline_bytes"]) * factor)


def _spread_rounds(rounds: dict, strategy: str, spread: float) -> None:
    """One strategy's round medians spread evenly over `spread` of their median (min to max)."""
    row = next(r for r in rounds["strategies"] if r["id"] == strategy)
    n, median = len(row["round_ms"]), row["median_ms"]
    row["round_ms"] = [median * (1 - spread / 2 + spread * i / (n - 1)) for i in range(n)]


def _move_bytes(run: dict, source: str, target: str, fraction: float) -> None:
    moved = int(run["breakdown"][source] * fraction)
    run["breakdown"][source] -= moved
    run["breakdown"][target] += moved


def _grow_leak(run: dict, nbytes: int) -> None:
    run["growth_bytes_per_step"] = nbytes


MUTATIONS = [
    # "step 1's backward bar is clearly lower than step 2's": 1 % lower is not clearly lower
    (
        "analysis",
        "memory",
        "try_expect",
        "changed",
        lambda r: _scale_phase_peak(
            r, 1, "backward", 0.99 * metrics.phase_peak(r, 2, "backward") / metrics.phase_peak(r, 1, "backward")
        ),
    ),
    # "Gradients are as large as the parameters, Adam's state is twice them"
    ("analysis", "breakdown", "expect", "run", lambda r: _move_bytes(r, "optimizer_state", "temporaries", 0.1)),
    # "a step this size ... reaches only a few TFLOP/s": 15 TFLOP/s is not a few
    ("analysis", "time", "expect", "run", lambda r: r.update(tflops=15.0)),
    # "takes only a few milliseconds": 15 ms is not a few
    ("optimization", "time", "expect", "run", lambda r: r["step_ms"].update(median=15.0)),
    # "a small fraction of the GPU's arithmetic rate": 78 % of the fp32 rate is not
    ("optimization", "time", "expect", "run", lambda r: r.update(tflops=0.78 * r["device"]["rates"]["tflops"]["fp32"])),
    # "gradients are zero"
    ("optimization", "breakdown", "expect", "run", lambda r: _move_bytes(r, "activations", "gradients", 0.0005)),
    # "parameters and optimizer state keep exactly their bytes"
    (
        "monitoring",
        "breakdown",
        "try_expect",
        "changed",
        lambda r: _move_bytes(r, "optimizer_state", "activations", 0.005),
    ),
    # "one 512-byte block on a GPU": two blocks are not one
    ("leaks", "leak", "expect", "append_scalar_loss_after_backward", lambda r: _grow_leak(r, 1024)),
    ("leaks", "leak", "try_expect", "append_scalar_loss_after_backward", lambda r: _grow_leak(r, 1024)),
    # "climbs exactly like cache_outputs: one (batch x width) tensor per step"
    (
        "leaks",
        "leak",
        "expect",
        "append_loss_after_backward",
        lambda r: _grow_leak(r, r["growth_bytes_per_step"] * 1.05),
    ),
    # "On a GPU the peak drops by about a fifth"
    (
        "exercise1",
        "memory",
        "try_expect",
        "changed",
        lambda r: r.update(peak_bytes=r["baseline_bytes"] + int(metrics.net_peak(r) * 0.88 / 0.8)),
    ),
    # "On the H200 it fell by ... more than Adam's two states: the foreach temporaries went too"
    ("exercise1", "breakdown", "try_expect", "run", lambda r: _move_bytes(r, "temporaries", "optimizer_state", 1)),
    # "on a GPU the median barely moves": 1.4x is not barely
    ("exercise1", "time", "try_expect", "changed", lambda r: r["step_ms"].update(median=r["step_ms"]["median"] * 1.45)),
    # "even the baseline's rounds scatter by tens of percent of its median": 8 % is not tens of percent
    ("compare", "rounds", "expect", "rounds", lambda r: _spread_rounds(r, "baseline", 0.08)),
]


@pytest.mark.parametrize(
    ("lesson", "kind", "field", "key", "mutate"),
    MUTATIONS,
    ids=[f"{m[0]}.{m[1]}.{m[2]}.{m[3]}.{i}" for i, m in enumerate(MUTATIONS)],
)
def test_a_recording_that_contradicts_its_sentence_fails_the_check(lesson, kind, field, key, mutate):
    runs = _prompt_runs(lesson, kind)
    assert expectations.verdict(_prompt_outcomes(lesson, kind, field, runs)) is True
    mutate(runs[key])
    assert expectations.verdict(_prompt_outcomes(lesson, kind, field, runs)) is False


def _fact_holds(lesson: str, name: str, mutate_id: str | None = None, mutate=None) -> bool:
    spec = content.meta(lesson)["facts"][name]

    def load(rid):
        result = _recorded(rid)
        if rid == mutate_id:
            mutate(result)
        return result

    return facts.holds(spec, facts.value(spec, load), facts.paired_summary(spec, load))


def _slow_down(strategy: str, factor: float):
    return lambda result: _slow_strategy(result, strategy, factor)


@pytest.mark.parametrize(
    ("lesson", "name", "rid", "mutate"),
    [
        # "each micro-batch of 2048 still keeps the GPU busy, so it costs almost no time": a quarter more is not
        # (a paired fact: its rounds recording, every round of accumulation a fifth slower)
        ("exercise2", "accum_time", catalog.rounds_set_id("exercise2", "b8192"), _slow_down("accum4", 1.22)),
        # "(one allocator block)": two blocks are not one
        (
            "exercise3",
            "scalar_kept_bytes",
            "leaks-leak-append_scalar_loss_after_backward",
            lambda r: r.update(growth_bytes_per_step=1024),
        ),
        (
            "leaks",
            "scalar_kept_bytes",
            "leaks-leak-append_scalar_loss_after_backward",
            lambda r: r.update(growth_bytes_per_step=1024),
        ),
        # "On a GPU the peak drops by about a fifth": 14 % is not about a fifth
        (
            "exercise1",
            "fused_saving_pct",
            "exercise1-adam_fused",
            lambda r: r.update(peak_bytes=r["baseline_bytes"] + int(metrics.net_peak(r) * 1.08)),
        ),
    ],
)
def test_a_quoted_fact_leaves_its_range_when_the_recording_contradicts_the_sentence(lesson, name, rid, mutate):
    assert _fact_holds(lesson, name)
    assert not _fact_holds(lesson, name, rid, mutate)
