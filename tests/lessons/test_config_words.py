"""A configuration a lesson states in numbers ("20 layers", "batch 32", "4 micro-batches", "8 key/value heads") is
one the course's recordings ran, in both languages (course/config_words.py): "batch 128" edited into "batch 96", or the
Chinese "20 层" alone into "24 层", fails against the recorded configurations. An edit into another recorded value
(batch 32 into 64) fails where the sentence quotes a fact of the run it names, against that run's configuration."""

from __future__ import annotations

import pytest

from course import content, recordings
from course import finetune_lesson as fl
from course import own_model as om
from course.config_words import stated, unbacked, unmatched
from tests.lessons.test_direction_words import LESSONS, edited_texts, lesson_facts, texts

# A model preset's Hugging Face configuration, as the prose names its fields.
HF_FIELDS = {
    "num_hidden_layers": "layers",
    "hidden_size": "width",
    "num_attention_heads": "heads",
    "num_key_value_heads": "kv_heads",
}


def _add(values: dict, config: dict) -> None:
    for field, value in config.items():
        field = HF_FIELDS.get(field, field)
        if isinstance(value, int) and not isinstance(value, bool):
            values.setdefault(field, set()).add(value)
    if isinstance(config.get("batch"), int) and isinstance(config.get("accum"), int):  # "micro-batches of 8"
        values["batch"].add(config["batch"] // config["accum"])
    for strategy in config.get("strategies") or []:
        _add(values, strategy.get("config") or {})


def recorded_values(lesson: str) -> dict[str, set[int]]:
    """Every value each configuration field has in the course's recordings (a lesson quotes another's: "the course
    model at batch 32, optimization page"), the lesson's preset and techniques, and the model presets and estimates
    it quotes."""
    values: dict[str, set[int]] = {}
    meta = content.meta(lesson)
    for job in recordings.all_jobs():
        _add(values, job["params"])
    if meta.get("preset"):
        _add(values, content.over_preset(meta, {}))
    for technique in meta.get("techniques") or []:
        for config in content.technique_configs(meta, technique):
            _add(values, config)
    data = {"finetune": fl, "yourmodel": om}.get(lesson)
    if data is not None:
        for estimate in data.estimates().values():
            _add(values, estimate["config"])
            _add(values, estimate["config"].get("overrides") or {})
        for row in data.h200_rows().values():
            _add(values, row.get("config") or row.get("levers") or {})
        for preset in om.presets().values():
            _add(values, preset["config"])
            _add(values, preset["defaults"])
    return values


_RECORDED = {job["id"]: job["params"] for job in recordings.all_jobs()}


def run_values(name: str) -> dict[str, set[int]] | None:
    """The values of each field in one recording (a rounds set: every strategy's), None for a name that is none."""
    if name not in _RECORDED:
        return None
    values: dict[str, set[int]] = {}
    _add(values, _RECORDED[name])
    return values


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("lesson", LESSONS)
def test_a_sentence_quoting_a_run_states_that_runs_configuration(lesson, lang):
    facts = lesson_facts(lesson)
    wrong = [w for text in texts(lesson, lang) for w in unmatched(text, lang, facts, run_values)]
    assert not wrong, "\n".join(wrong)


def test_sentences_quoting_runs_state_their_configurations():
    """The check above reads something: the configuration numbers of sentences that quote a run's fact."""
    checked = 0
    for lesson in LESSONS:
        facts = lesson_facts(lesson)
        for lang in ("en", "zh"):
            for text in texts(lesson, lang):
                # Every number such a sentence states, each edited into one no run has: all are caught.
                for _field, value, words in stated(text, lang):
                    edited = text.replace(words, words.replace(str(value), "7919"))
                    checked += len(unmatched(edited, lang, facts, run_values)) > len(
                        unmatched(text, lang, facts, run_values)
                    )
    assert checked >= 40, checked  # 44 when written


@pytest.mark.parametrize(
    "lesson,lang,before,after",
    [
        ("compare", "en", "for the course model at batch 32,", "for the course model at batch 64,"),
        ("optimization", "zh", "教程模型的 batch 32 拆成", "教程模型的 batch 64 拆成"),
        ("exercise1", "zh", "batch 32 时它在", "batch 64 时它在"),
        ("optimization", "en", "16 layers of width 512", "20 layers of width 512"),
    ],
)
def test_a_configuration_number_edited_into_another_recorded_value_is_caught(lesson, lang, before, after):
    assert not any(unbacked(t, lang, recorded_values(lesson)) for t in edited_texts(lesson, lang, before, after))
    facts = lesson_facts(lesson)
    assert any(unmatched(t, lang, facts, run_values) for t in edited_texts(lesson, lang, before, after))


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("lesson", LESSONS)
def test_every_configuration_number_is_a_recorded_one(lesson, lang):
    values = recorded_values(lesson)
    wrong = [w for text in texts(lesson, lang) for w in unbacked(text, lang, values)]
    assert not wrong, "\n".join(wrong)


def test_the_lessons_state_configurations_in_both_languages():
    for lang in ("en", "zh"):
        said = {field for lesson in LESSONS for text in texts(lesson, lang) for field, _, _ in stated(text, lang)}
        assert {"batch", "layers", "accum", "heads", "kv_heads", "seq_len"} <= said, (lang, said)


@pytest.mark.parametrize(
    "lesson,lang,before,after",
    [
        ("optimization", "en", "20 layers", "24 layers"),
        ("optimization", "zh", "20 层", "24 层"),
        ("monitoring", "en", "batch 128", "batch 96"),
        (
            "finetune",
            "en",
            "(8\nkey/value heads for 32 query heads here)",
            "(4\nkey/value heads for 32 query heads here)",
        ),
        ("optimization", "zh", "4 个微批次", "6 个微批次"),
        ("finetune", "zh", "8 个键/值头", "4 个键/值头"),
    ],
)
def test_a_configuration_number_edited_is_caught(lesson, lang, before, after):
    values = recorded_values(lesson)
    edited = edited_texts(lesson, lang, before, after)
    assert any(unbacked(t, lang, values) for t in edited)
