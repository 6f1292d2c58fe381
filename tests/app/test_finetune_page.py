"""The "Fine-tuning memory" page in both languages: it opens without an error, every checked sentence holds on the
table it sits under, and its exercise grades the learner's own configuration on the exercise's card: a model other
than the exercise's is named as the reason, and a configuration that runs there passes."""

from __future__ import annotations

import pytest

from tests.app.pages import open_page


def _texts(at) -> str:
    parts = [m.value for m in at.markdown] + [s.value for s in at.success] + [i.value for i in at.info]
    return "\n".join(parts + [w.value for w in at.warning])


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_page_opens_and_its_sentences_hold(lang):
    at = open_page("finetune", lang)
    assert not at.exception and not at.error, [e.value for e in at.error]
    texts = _texts(at)
    assert ":material/check_circle:" in texts and ":material/warning:" not in texts
    from course import finetune_lesson as fl

    shown = at.table[0].value  # the H200 runs, as a static table (long setup names wrap)
    assert len(shown) == len(fl.table_rows())
    assert list(shown.iloc[:, 1]) == [f"{r['measured_gib']:.2f}" for r in fl.table_rows()]
    assert "{{" not in texts  # every quoted number is filled in


def test_the_exercise_names_what_stands_in_the_way():
    at = open_page("finetune", "en")  # the exercise's model at full size: nothing known against it before a check
    assert "Press Check" in "\n".join(c.value for c in at.caption)
    at = open_page("finetune", "en", state={"ym_size": "tiny"})
    texts = _texts(at)  # known before any check: the model and its sequence
    assert "the exercise is about the Llama-3-8B shape at full size" in texts
    assert "the sequence must be 2048 tokens or more" in texts  # the tiny variant's sequence is shorter
    at.button(key="ft.exercise_check").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert "the exercise is about the Llama-3-8B shape at full size" in _texts(at)


def test_qlora_alone_is_judged_too_big_for_the_exercise_card():
    """The exercise's first try, as the lesson suggests it: QLoRA alone at seq 2048 peaks past the card itself."""
    at = open_page("finetune", "en", state={"ym_finetune": "qlora"})
    at.button(key="ft.exercise_check").click().run(timeout=300)
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert "more than the card's 23.64 GiB" in _texts(at)
