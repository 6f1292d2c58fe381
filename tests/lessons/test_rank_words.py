"""A sentence that says "per rank" quotes only facts read on every rank of a data-parallel recording, and a figure of
one rank is quoted where the sentence names that rank, in both languages (course/rank_words.py)."""

from __future__ import annotations

import pytest

from course.rank_words import PER_RANK, findings
from course.sentences import sentences
from experiments.core.recorded import load_recorded
from tests.lessons.test_direction_words import LESSONS, texts
from tests.lessons.test_direction_words import findings as lesson_findings


def _ranked(spec: dict) -> bool:
    result = load_recorded(spec.get("run"))
    return bool(result and result.get("ranks"))


def _all(lang: str, edit=lambda t: t) -> list[str]:
    check = lambda text, facts, lang: findings(edit(text), facts, lang, _ranked)  # noqa: E731
    return [f for lesson in LESSONS for f in lesson_findings(check, lesson, lang)]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_per_rank_sentence_quotes_facts_read_on_every_rank(lang):
    assert not _all(lang), "\n".join(_all(lang))
    # Not vacuous: lesson 6 says "per rank" over its facts, and quotes rank 0's driver figure, in both languages.
    said = [
        s for lesson in LESSONS for text in texts(lesson, lang) for s in sentences(text) if PER_RANK[lang].search(s)
    ]
    assert any("{{zero1_state_ratio}}" in s for s in said), said
    assert any(
        s for lesson in LESSONS for t in texts(lesson, lang) for s in sentences(t) if "{{zero3_outside_mib}}" in s
    )
    assert "zero3_outside_mib" in str(_all(lang, lambda t: t.replace("rank 0", "rank 1")))


FACTS = {
    "state": {"metric": "category_ratio", "run": "multigpu-h200x2-ddp_zero1"},
    "outside": {"metric": "driver_outside_mib", "run": "multigpu-h200x2-fsdp2_zero3", "rank": 0},
    "single": {"metric": "net_peak_mib", "run": "monitoring-baseline"},
}


@pytest.mark.parametrize(
    "lang,text,bad",
    [
        ("en", "ZeRO-1 keeps {{state}} of the state per rank.", False),
        ("en", "The driver holds {{outside}} MiB beyond reserved on rank 0's GPU.", False),
        ("en", "The driver holds {{outside}} MiB beyond reserved per rank.", True),  # one rank's figure, said of all
        ("en", "The driver holds {{outside}} MiB beyond reserved.", True),  # which rank's, unsaid
        ("en", "One GPU peaks at {{single}} MiB per rank.", True),  # no ranks in that recording
        ("zh", "ZeRO-1 每个 rank 保留 {{state}} 的状态。", False),
        ("zh", "驱动在 rank 0 的 GPU 上多占 {{outside}} MiB。", False),
        ("zh", "驱动在每张卡上多占 {{outside}} MiB。", True),
        ("zh", "单卡逐卡峰值 {{single}} MiB。", True),
    ],
)
def test_the_rank_words_check_fails_where_the_words_do_not_hold(lang, text, bad):
    ranked = {"state": True, "outside": True, "single": False}
    got = findings(text, FACTS, lang, lambda spec: ranked[next(k for k, v in FACTS.items() if v is spec)])
    assert bool(got) == bad, got


def test_a_lora_adapters_rank_is_not_a_data_parallel_rank():
    text = "Every rank-16 LoRA adapter pages {{single}} MB."
    assert not findings(text, FACTS, "en", lambda spec: False)
