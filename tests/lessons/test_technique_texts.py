"""Each optimization technique's explanation ("why it holds", "why it does not") states what the pair beside it
shows; the page evaluates it on that pair (app/views/optimization.py). Here: the text the H200 verdict selects,
on the H200 pair, and the text a learner without a GPU sees, on the pair run at the page's CPU size."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from course import claims, content, expectations
from experiments.core.recorded import load_recorded

sys.path.insert(0, str(Path(__file__).parent))
from test_lesson_data import LESSONS, _sum_outcomes, cpu_run  # noqa: E402

TECHNIQUES = [(lesson, t["id"]) for lesson in LESSONS for t in content.meta(lesson).get("techniques") or []]


def _technique(lesson: str, tid: str) -> dict:
    return {t["id"]: t for t in content.meta(lesson)["techniques"]}[tid]


def _explanation_outcomes(technique: dict, tech: dict, base: dict) -> tuple[str, list[dict]]:
    """The explanation the page shows beside this pair's verdict, evaluated on the pair (app/views/optimization)."""
    verdict = claims.holds(claims.measure(technique.get("metric", "peak_saving_pct"), tech, base),
                           technique.get("claimed_range"))
    key, checks = claims.explanation(technique, verdict)
    assert key, f"{technique['id']}: no verdict on this pair"
    return key, expectations.evaluate(checks, claims.runs(tech, base))


@pytest.mark.parametrize(("lesson", "tid"), TECHNIQUES, ids=[t for _, t in TECHNIQUES])
def test_technique_explanation_holds_on_the_h200_pair(lesson, tid):
    technique = _technique(lesson, tid)
    tech, base = (load_recorded(f"{lesson}-{tid}-{which}") for which in ("config", "baseline"))
    key, outcomes = _explanation_outcomes(technique, tech, base)
    failed = [o for o in outcomes if o["holds"] is False]
    assert not failed, f"{lesson}.{tid}.{key} does not hold on the H200 pair: {failed}"
    assert not expectations.unapplied(outcomes), f"{lesson}.{tid}.{key}: {expectations.unapplied(outcomes)}"
    assert expectations.verdict(outcomes) is True


@pytest.mark.parametrize(("lesson", "tid"), TECHNIQUES, ids=[t for _, t in TECHNIQUES])
def test_technique_explanation_holds_on_a_cpu_pair(lesson, tid):
    """What a learner without a GPU sees: the pair run at the page's CPU size, and the explanation its verdict picks."""
    meta = content.meta(lesson)
    technique = _technique(lesson, tid)
    checks = technique["why_holds_expect"] + technique["why_not_expect"]
    if not any(not c.get("devices") or "cpu" in c["devices"] for c in checks):
        pytest.skip("both explanations speak of a GPU only (tensor cores, launch-bound kernels)")
    config, baseline = content.technique_configs(meta, technique, content.cpu_scale(meta))
    tech, base = cpu_run("run", config), cpu_run("run", baseline)
    key, outcomes = _explanation_outcomes(technique, tech, base)
    failed = [o for o in outcomes if o["holds"] is False]
    assert not failed, f"{lesson}.{tid}.{key} does not hold on the CPU pair: {failed}"
    assert not expectations.unapplied(outcomes), f"{lesson}.{tid}.{key}: {expectations.unapplied(outcomes)}"
    for which, run in (("technique", tech), ("baseline", base)):
        off = [o for o in _sum_outcomes(run) if o["holds"] is not True]
        assert not off, f"{lesson}.{tid} {which}: categories minus peak (MiB): {[o['actual'] for o in off]}"
