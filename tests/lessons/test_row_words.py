"""The profiler row a sentence puts a figure under is the row its fact reads (course/row_words.py), in both
languages, for every lesson whose facts read a profiler table."""

from __future__ import annotations

import pytest

from course import catalog, content
from course.row_words import misattributed, named_rows
from experiments.core.recorded import load_recorded


def _rows(meta: dict) -> list[str]:
    runs = {spec["run"] for spec in (meta.get("facts") or {}).values() if "row" in spec}
    return [str(r.get("name", "")) for run in runs for r in (load_recorded(run) or {}).get("rows") or []]


CASES = [
    (lesson, lang)
    for lesson in catalog.LESSON_IDS
    for lang in ("en", "zh")
    if any("row" in spec for spec in (content.meta(lesson).get("facts") or {}).values())
]


@pytest.mark.parametrize("lesson, lang", CASES)
def test_every_profiler_figure_is_put_under_the_row_its_fact_reads(lesson, lang):
    meta = content.meta(lesson)
    text = (content.lessons_dir() / lesson / f"lesson.{lang}.md").read_text(encoding="utf-8")
    assert misattributed(text, meta["facts"], _rows(meta)) == []


def test_the_lessons_that_quote_a_profiler_row_are_checked():
    assert ("analysis", "en") in CASES and ("analysis", "zh") in CASES


def test_a_figure_moved_under_another_row_or_left_without_one_is_caught():
    facts = {"self": {"row": "Optimizer.step"}, "other": {}}
    rows = ["Optimizer.step#Adam.step", "Optimizer.zero_grad#Adam.zero_grad", "aten::mm"]
    right = "- `Optimizer.step`'s total is 0 MiB, its `foreach` temporaries aside. Its *self* memory is {{self}} MiB."
    assert misattributed(right, facts, rows) == []
    wrong = right.replace("`Optimizer.step`'s", "`Optimizer.zero_grad`'s")
    assert misattributed(wrong, facts, rows) == [
        "self: the prose names the row 'Optimizer.zero_grad', the fact reads 'Optimizer.step'"
    ]
    alone = "- `Optimizer.step` frees.\n- Its self memory is {{self}} MiB and {{other}}."
    assert misattributed(alone, facts, rows) == ["self: the prose names the row None, the fact reads 'Optimizer.step'"]
    assert named_rows("`aten::mm` {{a.lo}} `nothing` {{b}}", lambda s: s.startswith("aten")) == [
        ("a", "aten::mm"),
        ("b", "aten::mm"),
    ]
