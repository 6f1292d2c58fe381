"""Every quoted fact is written in its metric's unit, a paired fact's spread shown as a range from its lowest to its
highest, and a fact read at a step and a phase beside the words of that step and phase, in both languages
(course/quote_words.py): "{{peak_mib}} GiB", "between {{t.hi}}× and {{t.lo}}×" or "step 2's backward peaks at
{{step1_backward_mib}}" fail here against the facts' own definitions."""

from __future__ import annotations

import pytest

from course.quote_words import misnamed_moments, misordered_ranges, unit, wrong_units
from tests.lessons.test_direction_words import LESSONS, lesson_facts, texts


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("lesson", LESSONS)
def test_every_quoted_fact_is_in_its_unit_range_and_moment(lesson, lang):
    facts = lesson_facts(lesson)
    wrong = [
        w
        for text in texts(lesson, lang)
        for w in wrong_units(text, facts) + misordered_ranges(text) + misnamed_moments(text, facts, lang)
    ]
    assert not wrong, "\n".join(wrong)


def test_the_lessons_quote_units_ranges_and_moments_the_checks_read():
    """The checks read what the lessons write (a pattern that matched nothing would pass everything)."""
    en = [t for lesson in LESSONS for t in texts(lesson, "en")]
    assert sum("MiB" in t for t in en) > 10 and any(".lo}}" in t for t in en)
    facts = lesson_facts("monitoring")
    assert misnamed_moments("step 1's backward peaks at {{mon_step2_backward_mib}} MiB", facts, "en")


def test_a_unit_swapped_is_caught():
    facts = {"p": {"metric": "net_peak_mib"}, "s": {"metric": "peak_saving_pct"}, "r": {"metric": "peak_ratio"}}
    assert not wrong_units("its peak ({{p}} MiB) fell by {{s}} % to {{r}}×", facts)
    assert wrong_units("its peak ({{p}} GiB)", facts)
    assert wrong_units("峰值降低了 {{s}} 倍", facts)
    assert wrong_units("to {{r}} MiB", facts)
    assert (unit("saving_gib"), unit("step_ms"), unit("paired_ratio"), unit("frag_larger_fits")) == (
        "GiB",
        "ms",
        "×",
        None,
    )


def test_a_range_turned_around_or_cut_is_caught():
    assert not misordered_ranges("about {{t}}× (between {{t.lo}}× and {{t.hi}}× over {{t.rounds}} rounds)")
    assert misordered_ranges("about {{t}}× (between {{t.hi}}× and {{t.lo}}×)")
    assert misordered_ranges("约 {{t}} 倍（在 {{t.lo}} 到 {{t.rounds}} 倍之间）")
    assert not misordered_ranges("in every round at least {{t.lo}}×; at most {{u.hi}}× in any round")


@pytest.mark.parametrize(
    "text,lang",
    [
        ("On the H200, step 2's backward peaks at {{b1}} MiB and step 2's at {{b2}} MiB.", "en"),
        ("The recording's step-1 forward phase added {{b1}} MiB.", "en"),
        ("在 H200 上，第 2 步的“反向”峰值是 {{b1}} MiB。", "zh"),
        ("第 1 步的“前向”峰值是 {{b1}} MiB。", "zh"),
    ],
)
def test_a_step_or_phase_swapped_is_caught(text, lang):
    facts = {
        "b1": {"metric": "phase_peak_mib", "step": 1, "phase": "backward"},
        "b2": {"metric": "phase_peak_mib", "step": 2, "phase": "backward"},
    }
    assert misnamed_moments(text, facts, lang)
    right = text.replace("step 2's backward", "step 1's backward").replace("step-1 forward", "step-1 backward")
    right = right.replace("第 2 步", "第 1 步").replace("前向", "反向")
    assert not misnamed_moments(right, facts, lang), right
