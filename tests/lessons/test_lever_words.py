"""A sentence that says which lever works at a peak ("change the optimizer, not the activations") is checked against the
recording behind it, in both languages (course/lever_words.py): the lever named holds a real share of the peak, the
one ruled out holds none, and the phase it names is the recording's peak phase."""

from __future__ import annotations

import pytest

from course.lever_words import claims, unbacked
from experiments.core.recorded import load_recorded
from tests.lessons.test_direction_words import LESSONS, edited_texts, lesson_facts, texts


def _findings(lang: str, lesson: str | None = None, edit=None) -> list[str]:
    out = []
    for name in [lesson] if lesson else LESSONS:
        chunks = edited_texts(name, lang, *edit) if edit else texts(name, lang)
        out += [u for text in chunks for u in unbacked(text, lesson_facts(name), lang, load_recorded)]
    return out


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_lever_sentence_is_backed_by_its_recording(lang):
    assert not _findings(lang), "\n".join(_findings(lang))
    read = [c for text in texts("optimization", lang) for c in claims(text, lang)]
    assert any(c["ruled_out"] == {"activations"} and c["phase"] == "optimizer_step" for c in read), read


@pytest.mark.parametrize(
    "lang,before,after",
    [
        ("en", "change the optimizer, not the activations", "change the optimizer and the activations"),
        ("en", "change the optimizer, not the activations", "change the activations, not the optimizer"),
        ("en", "When the peak is in `optimizer_step`, change", "When the peak is in `backward`, change"),
        ("zh", "该改的是优化器，而不是激活值", "该改的是优化器和激活值"),
        ("zh", "该改的是优化器，而不是激活值", "该改的是激活值，而不是优化器"),
        ("zh", "峰值位于 `optimizer_step` 时", "峰值位于 `backward` 时"),
    ],
)
def test_a_lever_reversed_added_or_moved_to_another_phase_is_caught(lang, before, after):
    assert _findings(lang, "optimization", (before, after)), (before, after)


def test_the_shares_are_judged_on_the_recording():
    facts = {"m": {"metric": "net_peak_mib", "run": "r"}}
    runs = {
        "r": {
            "peak_phase": {"phase": "optimizer_step"},
            "breakdown": {"parameters": 300, "gradients": 300, "optimizer_state": 350, "activations": 50},
        }
    }
    text = "When the peak is in optimizer step, change the optimizer, not the activations ({{m}} MiB)."
    assert unbacked(text, facts, "en", runs.get) and "activations" in unbacked(text, facts, "en", runs.get)[0]
    runs["r"]["breakdown"]["activations"] = 10  # 1 % of the peak: ruled out rightly
    assert not unbacked(text, facts, "en", runs.get)
    assert unbacked(text.replace("optimizer step", "backward"), facts, "en", runs.get)
    assert unbacked(text, facts, "en", {}.get)  # no recording: nothing backs it
    assert not claims("Adam implementations do not change what is stored between steps.", "en")
