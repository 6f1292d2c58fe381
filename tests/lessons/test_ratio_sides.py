"""A quoted comparison names only the two setups it is recorded between, and a ratio's numerator first, in both
languages (course/ratio_sides.py): "TF32 took {{t}}× as long as AMP" edited into "... as long as fp32", or with the
two setups swapped, fails against the fact's recorded sides."""

from __future__ import annotations

import pytest

from course import content
from course.ratio_sides import misnamed, named, sides
from tests.lessons.test_direction_words import LESSONS, edited_texts, lesson_facts, texts

# Lessons whose prose compares setups by name: each names its setups (meta.json "setups").
COMPARING = ("compare", "exercise2", "finetune", "multigpu", "optimization", "yourmodel")


def setups(lesson: str) -> dict:
    return content.meta(lesson).get("setups") or {}


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("lesson", LESSONS)
def test_every_comparison_names_only_its_own_setups(lesson, lang):
    wrong = [w for text in texts(lesson, lang) for w in misnamed(text, lesson_facts(lesson), setups(lesson), lang)]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("lesson", COMPARING)
def test_every_named_comparison_has_both_sides_in_the_lessons_setups(lesson):
    """A time ratio of two strategies and a comparison of two estimates or runs: both sides have names, so that the
    check above reads every one of them (a side without names would skip the fact silently)."""
    specs = lesson_facts(lesson)
    keyed = ("strategy", "estimate", "h200")
    missing = {
        n: pair
        for n, s in specs.items()
        if (pair := sides(s)) and any(s.get(k) for k in keyed) and not set(pair) <= setups(lesson).keys()
    }
    assert not missing, missing


@pytest.mark.parametrize(
    "lesson,lang,before,after",
    [
        (
            "optimization",
            "en",
            "and TF32 still about {{amp_vs_tf32}}× as long as AMP",
            "and AMP still about {{amp_vs_tf32}}× as long as TF32",
        ),
        (
            "optimization",
            "zh",
            "fp32 的耗时就约是 TF32 的 {{tf32_speedup}} 倍",
            "fp32 的耗时就约是 AMP 的 {{tf32_speedup}} 倍",
        ),
        ("finetune", "en", "{{lora_act_ratio}} times full fine-tuning's", "{{lora_act_ratio}} times QLoRA's"),
        ("finetune", "zh", "是 LoRA 的 {{qlora_act_ratio}} 倍", "是全量微调的 {{qlora_act_ratio}} 倍"),
        (
            "multigpu",
            "en",
            "ZeRO-1 keeps {{zero1_state_ratio}} of DDP's",
            "ZeRO-1 keeps {{zero1_state_ratio}} of ZeRO-3's",
        ),
        ("multigpu", "zh", "ZeRO-3 的峰值是 DDP 的 {{big_peak_ratio}}", "DDP 的峰值是 ZeRO-3 的 {{big_peak_ratio}}"),
        ("compare", "en", "`for-loop` launches several kernels", "`fused` launches several kernels"),
        ("yourmodel", "zh", "把 fused 换成 foreach 要多用", "把 fused 换成检查点要多用"),
    ],
)
def test_a_comparison_edited_to_another_setup_or_turned_around_is_caught(lesson, lang, before, after):
    edited = edited_texts(lesson, lang, before, after)
    assert any(misnamed(t, lesson_facts(lesson), setups(lesson), lang) for t in edited)


def test_a_longer_name_is_one_name():
    names = {"strict": {"en": ["strict fp32"]}, "fp32": {"en": ["fp32"]}, "q": {"en": ["QLoRA"]}, "l": {"en": ["LoRA"]}}
    assert [sorted(ids) for _, ids in named("In strict fp32 its peak", names, "en")] == [["strict"]]
    assert [sorted(ids) for _, ids in named("QLoRA beside LoRA", names, "en")] == [["q"], ["l"]]
    zh = {"q": {"zh": ["QLoRA"]}, "l": {"zh": ["LoRA"]}}
    assert [sorted(ids) for _, ids in named("QLoRA 比 LoRA 多", zh, "zh")] == [["q"], ["l"]]
