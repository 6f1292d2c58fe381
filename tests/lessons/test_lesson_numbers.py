"""Every number a lesson quotes is a recorded one: a time ratio is read off paired, interleaved rounds recorded for
it, no measured-looking figure is typed into the prose, and every {{fact}} the prose quotes has a recording."""

from __future__ import annotations

import re

import pytest

from course import catalog, content, facts, recordings
from experiments.core import metrics
from experiments.core.recorded import load_recorded
from tests.lessons.prose import bare_numbers, prose_of

LESSONS = catalog.LESSON_IDS
JOBS = recordings.all_jobs()
MARKDOWN = sorted(content.lessons_dir().glob("*/*.md"))


# --- every time ratio a lesson states is a paired ratio over interleaved rounds recorded for it ---

ROUNDS_JOBS = {j["id"]: j for j in JOBS if j["kind"] == "timing_rounds"}


@pytest.mark.parametrize("lesson", LESSONS)
def test_time_ratio_facts_read_paired_interleaved_rounds(lesson):
    for name, spec in (content.meta(lesson).get("facts") or {}).items():
        assert spec.get("metric") != "step_time_ratio", (
            f"{lesson}.{name} reads a time ratio off one pair of runs; bind it to a rounds recording (paired_ratio)"
        )
        if spec.get("metric") != facts.PAIRED:
            continue
        job = ROUNDS_JOBS.get(spec.get("run"))
        assert job, f"{lesson}.{name}: {spec.get('run')} is not a timing_rounds job of any lesson"
        ids = [s["id"] for s in job["params"]["strategies"]]
        assert spec.get("strategy") in ids and spec.get("versus") in ids, f"{lesson}.{name}: not in {ids}"
        assert job["params"]["rounds"] >= metrics.VERDICT_MIN_ROUNDS, f"{lesson}.{name}: too few rounds for a verdict"
        assert spec.get("min") is not None or spec.get("max") is not None, f"{lesson}.{name} states no direction"


def test_rounds_sets_are_short_on_the_gpu():
    """What the lead records on the H200 (rounds 5, at most 10 steps, at most 7 strategies per set)."""
    for lesson in LESSONS:
        for rset in content.rounds_sets(content.meta(lesson)):
            params = content.rounds_set_params(content.meta(lesson), rset)
            assert params["rounds"] == metrics.VERDICT_MIN_ROUNDS and params["steps"] <= 10, (lesson, rset["id"])
            assert 2 <= len(params["strategies"]) <= 7, (lesson, rset["id"])


def test_time_claims_of_the_optimization_page_are_timed_in_rounds_of_exactly_their_pair():
    meta = content.meta("optimization")
    timed = [x for x in meta["techniques"] if x.get("metric") == "step_time_ratio"]
    assert timed
    for technique in timed:
        ref = technique.get("rounds") or {}
        rset = content.rounds_set(meta, ref.get("set") or "")
        assert rset, f"{technique['id']}: a time claim without a rounds set"
        configs = {s["id"]: content.over_preset(meta, s.get("config")) for s in rset["strategies"]}
        config, baseline = content.technique_configs(meta, technique)
        assert configs.get(ref.get("strategy")) == config, technique["id"]
        assert configs.get(ref.get("versus")) == baseline, technique["id"]


def test_compare_prose_and_rounds_box_agree_on_every_paired_fact():
    """The compare page's prose and its rounds box read the same recording through the same statistic: a fact
    stated as slower (min >= 1) is a "slower" verdict in the box, a faster one (max <= 1) a "faster" one."""
    recorded = load_recorded("compare-rounds")
    paired = {n: s for n, s in content.meta("compare")["facts"].items() if s.get("metric") == facts.PAIRED}
    assert {s["strategy"] for s in paired.values()} >= {"amp_bf16", "adam_fused", "accumulation"}
    for name, spec in paired.items():
        assert spec["run"] == "compare-rounds" and spec["versus"] == "baseline", name
        box = metrics.paired(recorded, spec["strategy"], "baseline")
        expected = "slower" if (spec.get("min") or 0) >= 1 else "faster" if (spec.get("max") or 2) <= 1 else None
        assert expected and box["verdict"] == expected, (name, box["verdict"], box["ratios"])


@pytest.mark.parametrize("path", MARKDOWN, ids=[f"{p.parent.name}/{p.name}" for p in MARKDOWN])
def test_markdown_quotes_no_unrecorded_numbers(path):
    found = bare_numbers(path.read_text(encoding="utf-8"))
    assert not found, f"{path}: measured-looking numbers not taken from a recorded fact: {found}"


@pytest.mark.parametrize("lesson", LESSONS)
def test_prompts_quote_no_unrecorded_numbers(lesson):
    found = [n for text in prose_of(content.meta(lesson)) for n in bare_numbers(text)]
    assert not found, f"{lesson}: measured-looking numbers not taken from a recorded fact: {found}"


def test_the_lint_catches_what_it_should():
    assert bare_numbers("AMP was 1.4× slower and saved 19 % (about 960 MiB)") == ["1.4×", "19 %", "960 MiB"]
    assert bare_numbers("“memory saving: about 40-50%” and `x = 3.5 ms` and {{saving}} % and 20 MiB segments") == []


def test_the_home_page_has_one_lesson_map_drawn_from_the_catalog():
    """The home page draws its map from course/catalog.py (every page, by its sidebar name: lesson 6 was missing
    from a hand-written one once); the lesson text must not repeat it as a table of its own."""

    for language in ("en", "zh"):
        text = (content.lessons_dir() / "home" / f"lesson.{language}.md").read_text(encoding="utf-8")
        rows = [line for line in text.splitlines() if line.startswith("| ")]
        assert not rows, f"home/lesson.{language}.md repeats the lesson map: {rows[:2]}"
    home = (content.ROOT / "app" / "views" / "home.py").read_text(encoding="utf-8")
    assert "catalog.PAGE_IDS[1:]" in home and "st.page_link" in home


@pytest.mark.parametrize("lesson", LESSONS)
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_no_lesson_prose_quotes_a_fact_it_has_no_recording_for(lesson, lang):
    """A missing recording is a failed test, not a "—" in front of a learner: every {{fact}} a lesson's prose quotes
    has a value (a fact awaiting a recording may be defined, never quoted)."""
    text, _ = content.read_text(lesson, "lesson", lang)
    values = facts.resolve(content.meta(lesson).get("facts") or {}, load_recorded)
    missing = sorted(name for name in facts.placeholders(text or "") if values.get(name) == "—")
    assert not missing, f"{lesson} ({lang}) quotes facts with no recorded value: {missing}"


def test_a_chinese_line_break_inside_a_paragraph_does_not_become_a_space():
    """Markdown renders a soft line break as a space: between two Chinese characters it reads as a gap ("一步 用时").
    Every lesson's zh text is read with such breaks joined; code blocks and paragraph breaks stay."""
    joined = content.joined_cjk_lines("一步\n用时，\n二\n\n三\n- 四\n```\n五\n六\n```")
    assert joined == "一步用时，二\n\n三\n- 四\n```\n五\n六\n```"
    for lesson in LESSONS:
        text, used = content.read_text(lesson, "lesson", "zh")
        if used == "zh":
            outside_code = text.split("```")[::2]
            assert not any(re.search(r"[\u4e00-\u9fff，。：；]\n[\u4e00-\u9fff]", p) for p in outside_code), lesson
