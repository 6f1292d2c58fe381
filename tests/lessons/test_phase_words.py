"""Every prompt whose check places the peak in a phase says so in its words, in both languages
(course/phase_words.py): the phases of "it is in optimizer_step, not in backward" swapped, in one language alone,
fail here against the check, as the check itself fails against the run."""

from __future__ import annotations

import pytest

from course import content
from course.phase_words import misplaced_peaks

LESSONS = sorted(d.name for d in content.lessons_dir().iterdir() if (d / "meta.json").exists())


def placed_texts(lesson: str):
    """(prompt, text, the phases its peak_phase check allows) for every prompt text that has such a check."""
    for name, prompt in (content.meta(lesson).get("prompts") or {}).items():
        for text_key, checks_key in (("notice", "expect"), ("try", "try_expect")):
            phases = [c["is"] for c in prompt.get(checks_key, []) if c.get("check") == "peak_phase"]
            if phases and text_key in prompt:
                yield f"{name}.{text_key}", prompt[text_key], set(phases[0])


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("lesson", LESSONS)
def test_the_words_put_the_peak_where_the_check_does(lesson, lang):
    wrong = [f"{where}: {w}" for where, text, ok in placed_texts(lesson) for w in misplaced_peaks(text[lang], ok, lang)]
    assert not wrong, "\n".join(wrong)


def test_the_prompts_with_a_placed_peak_are_read():
    assert sum(1 for lesson in LESSONS for _ in placed_texts(lesson)) >= 10


@pytest.mark.parametrize(
    ("text", "lang"),
    [
        ("Find the tallest peak bar: it is in backward, not in optimizer_step.", "en"),
        ("Raise the batch: the peak moves into forward.", "en"),
        ("找到最高的峰值柱：它在“反向”阶段，而不是“优化器更新”。", "zh"),
    ],
)
def test_a_swapped_phase_is_caught(text, lang):
    assert misplaced_peaks(text, {"optimizer_step"}, lang)


def test_a_possessive_or_a_conditional_places_nothing():
    ok = {"backward"}
    assert not misplaced_peaks(
        "Step 1 peaks no higher than step 2, as Adam's state appears in step 1's optimizer step.", ok, "en"
    )
    assert not misplaced_peaks("When the peak is in optimizer_step (on a CPU), it is small.", ok, "en")
    assert not misplaced_peaks("第 1 步的峰值不高于第 2 步，因为 Adam 状态要到第 1 步的“优化器更新”才出现。", ok, "zh")
    assert not misplaced_peaks("Find the tallest peak bar: it is in backward, not in optimizer_step.", ok, "en")
