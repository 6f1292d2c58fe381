"""A sentence that compares a quoted fact with another figure says it the way the data has it, in both languages
(course/comparisons.py): "falls by {{accum_saving}} %, far less than the batch does" edited into "far more", or "fused
saves {{x}} times what checkpointing does" with the two levers swapped, fails here; and a "than" the data does not
bear out fails on the data."""

from __future__ import annotations

import pytest

from course import facts
from course.comparisons import false_comparisons, stated, wrong_comparisons
from experiments.core.recorded import load_recorded
from tests.lessons.test_direction_words import LESSONS, edited_texts, lesson_facts, texts


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("lesson", LESSONS)
def test_every_comparison_is_said_as_the_data_has_it(lesson, lang):
    specs = lesson_facts(lesson)
    wrong = [w for text in texts(lesson, lang) for w in wrong_comparisons(text, specs, lang)]
    assert not wrong, "\n".join(wrong)
    said = set().union(*(stated(text, specs, lang) for text in texts(lesson, lang)))
    assert said >= {n for n, s in specs.items() if s.get("than")}, "a declared comparison no sentence states"


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_comparison_holds_on_the_recordings(lesson):
    specs = {n: s for n, s in lesson_facts(lesson).items() if "run" in s}
    values = {n: facts.value(s, load_recorded) for n, s in specs.items()}
    assert not false_comparisons(specs, values)


def test_the_lessons_compare_and_order_facts():
    declared = {n for lesson in LESSONS for n, s in lesson_facts(lesson).items() if s.get("than") or s.get("order")}
    assert {"accum_saving", "combined_saved_mib", "impl_over_ckpt_2048"} <= declared, declared


@pytest.mark.parametrize(
    "lesson,lang,before,after",
    [
        ("optimization", "en", "far less than the batch does", "far more than the batch does"),
        ("optimization", "zh", "远小于", "远大于"),
        (
            "yourmodel",
            "en",
            "the optimizer implementation saves {{impl_over_ckpt_2048}} times what checkpointing does",
            "checkpointing saves {{impl_over_ckpt_2048}} times what the optimizer implementation does",
        ),
        ("yourmodel", "zh", "换优化器实现省下的显存是检查点的", "检查点省下的显存是换优化器实现的"),
        ("compare", "zh", "比单用任何一个都多", "比单用任何一个都少"),
        ("compare", "en", "more than either alone", "less than either alone"),
    ],
)
def test_a_comparison_turned_around_is_caught(lesson, lang, before, after):
    specs = lesson_facts(lesson)
    edited = edited_texts(lesson, lang, before, after)
    assert any(wrong_comparisons(t, specs, lang) for t in edited)


def test_a_comparison_the_data_does_not_bear_out_fails():
    specs = {"a": {"than": {"fact": "b", "is": "less"}}, "b": {}}
    assert not false_comparisons(specs, {"a": 1, "b": 2})
    assert false_comparisons(specs, {"a": 3, "b": 2})
