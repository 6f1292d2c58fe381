"""A configuration a lesson states in numbers ("20 layers", "batch 32", "4 micro-batches", "8 key/value heads") is
one the course's recordings ran, in both languages (course/config_words.py): "batch 128" edited into "batch 96", or the
Chinese "20 层" alone into "24 层", fails against the recorded configurations (an edit into another recorded value,
such as batch 64, does not)."""

from __future__ import annotations

import pytest

from course import content, recordings
from course import finetune_lesson as fl
from course import own_model as om
from course.config_words import stated, unbacked
from tests.lessons.test_direction_words import LESSONS, edited_texts, texts

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
