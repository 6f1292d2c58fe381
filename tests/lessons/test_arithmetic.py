"""Every sum a lesson writes out beside a figure gives that figure as the page renders it, in both languages
(course/arithmetic.py): "8 bytes (2 + 2 + 2 × 2)" edited to "2 × 3" in the Chinese text alone fails here."""

from __future__ import annotations

import pytest

from app import backend
from course import arithmetic, content, facts, finetune_lesson, own_model
from tests.lessons.test_direction_words import LESSONS, texts

# The lessons whose prose quotes a model's estimates: their own module of values, as their pages read them.
MODEL_VALUES = {"yourmodel": own_model.facts, "finetune": finetune_lesson.facts}


def rendered(lesson: str, lang: str) -> list[str]:
    meta = content.meta(lesson)
    values = backend.fact_values(meta.get("facts"))
    if lesson in MODEL_VALUES:
        values = {**values, **MODEL_VALUES[lesson](meta)}
    return [facts.render(text, values) for text in texts(lesson, lang)]


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("lesson", LESSONS)
def test_every_written_out_sum_gives_its_figure(lesson, lang):
    wrong = [w for text in rendered(lesson, lang) for w in arithmetic.wrong_sums(text)]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_sums_the_lessons_write_are_read(lang):
    """The check reads the sums the lessons do write (a pattern that matched nothing would pass everything)."""
    found = {
        lesson: sum(len(arithmetic.sums(t)) for t in rendered(lesson, lang)) for lesson in ("yourmodel", "multigpu")
    }
    assert found["yourmodel"] >= 2 and found["multigpu"] >= 1, found


def test_a_wrong_term_or_total_is_caught():
    assert arithmetic.wrong_sums("**8 bytes** (2 + 2 + 2 × 3);")
    assert arithmetic.wrong_sums("4（参数）+ 4（梯度）+ 8（Adam）同样是 15 字节")
    assert not arithmetic.wrong_sums("4 (parameter) + 4 (gradient) + 8 (Adam) = 16 bytes")
    assert not arithmetic.wrong_sums("60.1 GiB (15.0 + 29.9 + 15.2)")  # rounded to the figure's decimals
    assert arithmetic.wrong_sums("60.1 GiB (15.0 + 29.9 + 16.2)")


def test_a_sum_off_by_less_than_its_figure_shows_passes_and_more_fails():
    """The figure is rounded to its own decimals: 60.1 takes a sum of 60.05 to 60.15, not 60.3."""
    assert not arithmetic.wrong_sums("60.1 GiB (15.0 + 29.9 + 15.24)")
    assert arithmetic.wrong_sums("60.1 GiB (15.0 + 29.9 + 15.4)")
    assert arithmetic.wrong_sums("16 bytes (4 + 4 + 9)")


def test_a_sum_written_as_code_gives_its_figure_in_its_unit():
    assert not arithmetic.wrong_sums("`20 × (2048 × 2048 + 2048)` = 83,927,040 parameters")
    assert arithmetic.wrong_sums("`20 × (2048 × 2048 + 2048)` = 83,972,040 parameters")
    assert not arithmetic.wrong_sums("`20 × 2048 × 4` bytes = `160 KiB` per sample")
    assert arithmetic.wrong_sums("`20 × 2048 × 4` bytes = `320 KiB` per sample")
    assert arithmetic.wrong_sums("`20 × 2048 × 4` 字节 = `160 MiB`")
