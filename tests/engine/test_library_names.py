"""The command line's torch-free check of a model type reads transformers' tables as text: it must know every type
transformers itself knows (a type it missed would be refused although the library has it), and refuse a typo."""

import pytest

from experiments.core import library_names
from experiments.core.errors import ConfigError


def test_the_text_scan_knows_every_model_type_transformers_knows():
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    read = library_names._transformers_types()
    assert read is not None
    missing = [t for t in CONFIG_MAPPING_NAMES if t not in read[1] and t.replace("-", "_") not in read[2]]
    assert missing == []
    for name in CONFIG_MAPPING_NAMES:
        library_names.check_model_type(name)  # none refused


def test_a_typo_is_refused_with_the_closest_names_and_the_version():
    import transformers

    with pytest.raises(ConfigError) as e:
        library_names.check_model_type("lama")
    assert e.value.field == "model_source"
    assert "llama" in e.value.message.split("close matches:")[1] and transformers.__version__ in e.value.message


def test_unreadable_tables_leave_the_answer_to_transformers(monkeypatch):
    monkeypatch.setattr(library_names, "_transformers_types", lambda: None)
    library_names.check_model_type("surely-not-a-type")  # no refusal: the library decides later
