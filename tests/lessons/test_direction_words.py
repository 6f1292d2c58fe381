"""Every clause that quotes a number with a direction (a time ratio that is slower, a saving that is less memory)
says it in that direction's words or in none, in both languages: an edit of the prose that turns "lowers" into
"raises" or 变慢 into 变快 fails here against the recorded bounds, as an edit of the number fails in
test_lesson_data."""

from __future__ import annotations

import json
import re

import pytest

from course import content, directions, sentences
from course.directions import OPPOSITE, WORDS, contradictions, direction, unbacked, unnamed_wholes

LESSONS = sorted(
    d.name
    for d in content.lessons_dir().iterdir()
    if (d / "meta.json").exists() and (content.meta(d.name).get("facts") or content.meta(d.name).get("model_facts"))
)


def lesson_facts(lesson: str) -> dict:
    """The facts a lesson's prose quotes: from recordings, and from a model's estimates and measurements."""
    meta = content.meta(lesson)
    return {**(meta.get("facts") or {}), **(meta.get("model_facts") or {})}


def texts(lesson: str, lang: str) -> list[str]:
    """The lesson's prose in one language: its Markdown, and every {en, zh} text of its meta and strings."""
    out = []
    # The lesson, and an exercise's hints and answer: every Markdown page of the lesson in that language.
    for md in sorted((content.lessons_dir() / lesson).glob(f"*.{lang}.md")):
        out.append(md.read_text(encoding="utf-8"))

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get(lang), str) and {"en", "zh"} <= node.keys():
                out.append(node[lang])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(content.meta(lesson))
    strings = content.lessons_dir() / lesson / "strings.json"
    if strings.exists():
        walk(json.loads(strings.read_text(encoding="utf-8")))
    return out


def edited_texts(lesson: str, lang: str, before: str, after: str) -> list[str]:
    """The lesson's texts that hold `before`, each with it edited into `after` (a deliberate break of the prose)."""
    edited = [t.replace(before, after) for t in texts(lesson, lang) if before in t]
    assert edited, f"{lesson} ({lang}) no longer says {before!r}"
    return edited


def findings(check, lesson: str, lang: str) -> list[str]:
    """What `check(text, facts, lang)` finds in every text of the lesson in one language."""
    facts = lesson_facts(lesson)
    return [c for text in texts(lesson, lang) for c in check(text, facts, lang)]


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("lesson", LESSONS)
def test_no_clause_says_the_opposite_of_its_recorded_direction(lesson, lang):
    wrong = findings(contradictions, lesson, lang)
    assert not wrong, "\n".join(wrong)


def _stated(lang: str):
    """(lesson, text, the direction word in a fact's clause, the fact's direction) for every such clause."""
    for lesson in LESSONS:
        facts = lesson_facts(lesson)
        for text in texts(lesson, lang):
            for m in directions.FACT.finditer(text):
                way = direction(facts.get(m.group(1)) or {})
                if way is None:
                    continue
                here = sentences.clause(text, m.start(), m.end())
                for word in directions.found(WORDS[lang][way], here, lang):
                    yield lesson, here, word, way


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_direction_word_turned_around_is_caught(lang):
    stated = list(_stated(lang))
    assert len(stated) >= 5, f"only {len(stated)} clauses state a direction in words ({lang})"
    for lesson, here, word, (quantity, side) in stated:
        flipped_word = WORDS[lang][(quantity, OPPOSITE[side])][0]
        pattern = rf"\b{word}\b" if lang == "en" else re.escape(word)
        flipped = re.sub(pattern, flipped_word, here, count=1, flags=re.IGNORECASE)
        assert contradictions(flipped, lesson_facts(lesson), lang), (lesson, flipped)


@pytest.mark.parametrize(
    "spec,way",
    [
        ({"metric": "paired_ratio", "min": 1.0}, ("time", "up")),
        ({"metric": "paired_ratio", "max": 0.9}, ("time", "down")),
        ({"metric": "peak_ratio", "min": 0.2, "max": 0.95}, ("memory", "down")),
        ({"metric": "peak_saving_pct", "min": 10, "max": 40}, ("memory", "down")),
        ({"metric": "peak_saving_pct", "max": -1}, ("memory", "up")),
        ({"metric": "peak_ratio", "min": 0.5, "max": 1.5}, None),  # either side: no direction to state
        ({"metric": "net_peak_mib", "min": 100}, None),  # a size, not a change
        # differences between two setups: a saving is said of the setup that saves, an extra of the one that needs
        # more, unless the sentence makes the other setup its subject
        ({"metric": "saving_gib", "min": 10}, ("memory", "down")),
        ({"metric": "saving_gib", "min": 10, "subject": "other"}, ("memory", "up")),
        ({"metric": "measured_extra_gib", "min": 5}, ("memory", "up")),
        ({"metric": "measured_extra_gib", "min": 0, "max": 1, "subject": "other"}, ("memory", "down")),
        ({"metric": "saved_mib", "min": -5, "max": 5}, None),
    ],
)
def test_a_facts_bounds_fix_its_direction(spec, way):
    assert direction(spec) == way


def test_a_clause_is_judged_on_its_own_words():
    facts = {"s": {"metric": "peak_saving_pct", "min": 5}, "t": {"metric": "paired_ratio", "min": 1.1}}
    ok = "Checkpointing saves {{s}} % of the peak; the step is {{t}}× slower."
    assert contradictions(ok, facts, "en") == []
    assert contradictions(ok.replace("saves", "raises"), facts, "en")
    assert contradictions(ok.replace("slower", "faster"), facts, "en")
    assert contradictions("检查点使峰值增加 {{s}}%。", facts, "zh")
    assert contradictions("这一步变慢了，约是 {{t}} 倍。", facts, "zh") == []


def test_a_clause_ends_at_a_comma_and_at_a_turn_to_another_statement():
    """ "fell by 950 MiB, more than Adam's two states" compares sizes after the comma; "saves 20 MiB of activations but
    adds weight copies" states a second change: neither is the fact's direction. Inside its own clause a turned word
    is still caught."""
    facts = {"s": {"metric": "saved_mib", "min": 3}}
    for ok, lang in (
        ("It fell by {{s}} MiB, more than Adam's two states.", "en"),
        ("AMP saves {{s}} MiB of activations but adds weight copies.", "en"),
        ("它下降了 {{s}} MiB，比 Adam 的两份状态还多。", "zh"),
        ("省下了 {{s}} MiB 激活值，却增加了权重副本。", "zh"),
    ):
        assert contradictions(ok, facts, lang) == [], ok
    assert contradictions("AMP adds {{s}} MiB of activations but saves weight copies.", facts, "en")
    assert contradictions("它增加了 {{s}} MiB，比 Adam 的两份状态还多。", facts, "zh")


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("lesson", LESSONS)
def test_every_quoted_share_names_what_it_is_a_share_of(lesson, lang):
    wrong = findings(unnamed_wholes, lesson, lang)
    assert not wrong, "\n".join(wrong)


def test_a_share_edited_to_another_whole_is_caught_in_both_languages():
    facts = {"s": {"metric": "category_share_of_saving"}, "a": {"metric": "category_share_pct"}}
    assert not unnamed_wholes("14.7 GiB of that is state ({{s}} % of the saving): nothing else", facts, "en")
    assert unnamed_wholes("14.7 GiB of that is state ({{s}} % of the peak): nothing else", facts, "en")
    assert not unnamed_wholes("其中 14.7 GiB 是优化器状态（占省下部分的 {{s}} %）", facts, "zh")
    assert unnamed_wholes("其中 14.7 GiB 是优化器状态（占峰值的 {{s}} %）", facts, "zh")
    # A clause that carries on the same sentence's comparison keeps its whole; a new sentence does not.
    assert not unnamed_wholes("{{a}} % of the strict peak, against {{a}} % with the default.", facts, "en")
    assert unnamed_wholes("{{a}} % of the strict peak. Against {{a}} % with the default.", facts, "en")
    # The category is named too: a share of activations edited into gradients fails.
    cat = {"c": {"metric": "category_share_pct", "category": "activations"}}
    assert not unnamed_wholes("activations were {{c}} % of the peak", cat, "en")
    assert unnamed_wholes("gradients were {{c}} % of the peak", cat, "en")
    assert not unnamed_wholes("激活值占峰值的 {{c}} %", cat, "zh")
    assert unnamed_wholes("梯度占峰值的 {{c}} %", cat, "zh")


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("lesson", LESSONS)
def test_every_direction_said_is_fixed_by_the_facts_bounds(lesson, lang):
    """A clause that says "slower" beside a time ratio whose bounds allow either side is not checked by its data: a
    fact's "min" loosened from 1.5 to 0.5 under such a sentence fails here."""
    wrong = findings(unbacked, lesson, lang)
    assert not wrong, "\n".join(wrong)


def test_bounds_loosened_under_a_stated_direction_are_caught():
    facts = {"t": {"metric": "paired_ratio", "min": 1.5}}
    text = "It was slower in every round (between {{t.lo}}× and {{t.hi}}×)."
    assert not unbacked(text, facts, "en")
    assert unbacked(text, {"t": {"metric": "paired_ratio", "min": 0.5}}, "en")


@pytest.mark.parametrize(
    "text,lang",
    [
        ("ZeRO-3's peak is {{s}} % above DDP's.", "en"),
        ("ZeRO-3 的峰值比 DDP 高 {{s}} %。", "zh"),
        ("| preset | **faster**: about {{t}}× the fp32 time |", "en"),
        ("| 预设 | **更快**：耗时约是 fp32 的 {{t}} 倍 |", "zh"),
        ("It took {{t}} times as long, and was faster in every round (between {{t.lo}} and {{t.hi}} times).", "en"),
        ("用时是它的 {{t}} 倍，而且每一轮都更快（在 {{t.lo}} 到 {{t.hi}} 倍之间）。", "zh"),
        (
            "- **AMP is faster** at this size, in every round, by less: about {{t}}× (between {{t.lo}}× and {{t.hi}}×).",
            "en",
        ),
    ],
)
def test_a_direction_in_a_comparison_a_table_label_or_beside_a_spread_is_caught(text, lang):
    facts = {"s": {"metric": "peak_saving_pct", "min": 10}, "t": {"metric": "paired_ratio", "min": 1.0}}
    assert contradictions(text, facts, lang), text
    for a, b in (("above", "below"), ("高", "低"), ("faster", "slower"), ("更快", "更慢")):
        text = text.replace(a, b)
    assert not contradictions(text, facts, lang), text


def test_a_label_about_the_other_setup_says_its_direction():
    """ "**faster**: fp32 took {{t}}× as long" says AMP is faster with fp32's time ratio: "subject": "other"."""
    text = "| **faster**: fp32 took about {{t}}× as long |"
    assert contradictions(text, {"t": {"metric": "paired_ratio", "min": 3}}, "en")
    assert not contradictions(text, {"t": {"metric": "paired_ratio", "min": 3, "subject": "other"}}, "en")
