"""Each optimization technique's explanation ("why it holds", "why it does not") states what the data beside it
shows; the page evaluates it on that data (app/views/optimization.py). A memory claim's verdict and text come from
its pair of runs; a time claim's from the interleaved rounds of exactly that pair, its text checked on those rounds
(and on the pair, for what it says of memory or TFLOP/s). Here: the text the H200 data selects, on the H200 data,
and the text a learner without a GPU sees, on the data run at the page's CPU size."""

from __future__ import annotations

import pytest

from course import catalog, claims, content, expectations
from experiments.core.recorded import load_recorded
from tests.lessons.test_lesson_data import LESSONS, _record_command, _sum_outcomes, cpu_run

TECHNIQUES = [(lesson, t["id"]) for lesson in LESSONS for t in content.meta(lesson).get("techniques") or []]


def _technique(lesson: str, tid: str) -> dict:
    return {t["id"]: t for t in content.meta(lesson)["techniques"]}[tid]


def _shown(technique: dict, tech: dict, base: dict, rounds: dict | None) -> tuple[str, list[dict]]:
    """The explanation the page shows beside this data's verdict, evaluated on the data (app/views/optimization):
    over `rounds` (narrowed to the pair, claims.rounds_pair) for a time claim, on the pair otherwise."""
    assert rounds or not technique.get("rounds"), f"{technique['id']}: a time claim without its rounds"
    key, checks = claims.explanation(technique, claims.verdict(technique, tech, base, rounds))
    assert key, f"{technique['id']}: no verdict on this data, so the page shows no explanation"
    return key, expectations.evaluate(checks, claims.runs(tech, base, rounds=rounds))


def _recorded_rounds(lesson: str, technique: dict) -> dict | None:
    ref, rset = content.technique_rounds(content.meta(lesson), technique)
    if rset is None:
        return None
    rid = catalog.rounds_set_id(lesson, rset["id"])
    recorded = load_recorded(rid)
    if recorded is None:
        pytest.skip(f"{rid} {_record_command([rid])}")
    return claims.rounds_pair(recorded, ref["strategy"], ref["versus"])


@pytest.mark.parametrize(("lesson", "tid"), TECHNIQUES, ids=[t for _, t in TECHNIQUES])
def test_technique_explanation_holds_on_the_h200_data(lesson, tid):
    technique = _technique(lesson, tid)
    tech, base = (load_recorded(f"{lesson}-{tid}-{which}") for which in ("config", "baseline"))
    key, outcomes = _shown(technique, tech, base, _recorded_rounds(lesson, technique))
    failed = [o for o in outcomes if o["holds"] is False]
    assert not failed, f"{lesson}.{tid}.{key} does not hold on the H200 data: {failed}"
    assert not expectations.unapplied(outcomes), f"{lesson}.{tid}.{key}: {expectations.unapplied(outcomes)}"
    assert expectations.verdict(outcomes) is True


@pytest.mark.parametrize(("lesson", "tid"), TECHNIQUES, ids=[t for _, t in TECHNIQUES])
def test_technique_explanation_holds_on_the_cpu_data(lesson, tid):
    """What a learner without a GPU sees: the pair run at the page's CPU size and, for a time claim, its rounds
    timed there, and the explanation their verdict picks."""
    meta = content.meta(lesson)
    technique = _technique(lesson, tid)
    ref, rset = content.technique_rounds(meta, technique)
    if rset is not None and "cpu" not in (rset.get("devices") or ["cpu"]):
        pytest.skip("the page times this pair on a GPU only (and shows no explanation on a CPU)")
    checks = technique["why_holds_expect"] + technique["why_not_expect"]
    if not any(not c.get("devices") or "cpu" in c["devices"] for c in checks):
        pytest.skip("both explanations speak of a GPU only (tensor cores, launch-bound kernels)")
    config, baseline = content.technique_configs(meta, technique, content.cpu_scale(meta))
    tech, base = cpu_run("run", config), cpu_run("run", baseline)
    rounds = None
    if rset is not None:
        # As the page's live rounds: this pair alone, with the set's rounds, steps and warm-up.
        params = content.rounds_params(meta, [(claims.BASELINE, baseline), (claims.TECHNIQUE, config)], spec=rset)
        rounds = cpu_run("timing_rounds", params)
        if claims.verdict(technique, tech, base, rounds) is None:
            pytest.skip(f"these CPU rounds decide nothing, so the page shows no text: {rounds['paired']}")
    key, outcomes = _shown(technique, tech, base, rounds)
    failed = [o for o in outcomes if o["holds"] is False]
    assert not failed, f"{lesson}.{tid}.{key} does not hold on the CPU data: {failed}"
    assert not expectations.unapplied(outcomes), f"{lesson}.{tid}.{key}: {expectations.unapplied(outcomes)}"
    for which, run in (("technique", tech), ("baseline", base)):
        off = [o for o in _sum_outcomes(run) if o["holds"] is not True]
        assert not off, f"{lesson}.{tid} {which}: categories minus peak (MiB): {[o['actual'] for o in off]}"


def test_a_time_claims_text_is_chosen_and_checked_by_its_rounds_not_by_one_pair():
    """The pair's one step-time ratio and the rounds disagree here: the rounds decide which text shows, and the
    text's checks read the rounds. A recorded pair's ratio moved into the claimed range changes nothing; the rounds
    moved into it change the verdict, and a rounds check reads the changed rounds."""
    lesson, technique = "optimization", _technique("optimization", "accumulation_speed")
    tech, base = (load_recorded(f"{lesson}-accumulation_speed-{which}") for which in ("config", "baseline"))
    rounds = _recorded_rounds(lesson, technique)
    lo, hi = technique["claimed_range"]
    inside = dict(tech, step_ms=dict(tech["step_ms"], median=base["step_ms"]["median"] * (lo + hi) / 2))
    assert claims.holds(claims.measure("step_time_ratio", inside, base), technique["claimed_range"]) is True
    key, outcomes = _shown(technique, inside, base, rounds)
    assert key == "why_not" and expectations.verdict(outcomes) is True

    # Every round's technique time set to the baseline's of that round, times 1.0: the claim holds over rounds, and
    # the "why not" text's "several times as long in every round" would now be contradicted by those rounds.
    even = {
        **rounds,
        "strategies": [
            rounds["strategies"][0],
            dict(rounds["strategies"][1], round_ms=list(rounds["strategies"][0]["round_ms"])),
        ],
    }
    key, _ = _shown(technique, tech, base, even)
    assert key == "why_holds"
    outcomes = expectations.evaluate(technique["why_not_expect"], claims.runs(tech, base, rounds=even))
    assert [o["spec"]["metric"] for o in outcomes if o["holds"] is False] == ["paired_ratio_lo"]
