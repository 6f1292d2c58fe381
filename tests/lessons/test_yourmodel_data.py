"""The "Your model" lesson's numbers: every {{fact}} its texts and checks quote is defined and holds on the data the
page shows (lessons/yourmodel/estimates.json, the engine's replays; the H200 check once recorded), in both
languages; the data file is what the engine computes; a check fails when its data says otherwise."""

from __future__ import annotations

import pytest

from course import content, facts
from course import own_model as om

META = content.meta(om.LESSON)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_quoted_number_is_a_fact_of_the_lesson(lang):
    text, used = content.read_text(om.LESSON, "lesson", lang)
    assert used == lang
    quoted = facts.placeholders(text) | {n for c in META["checks"] for n in facts.placeholders(c["text"][lang])}
    assert quoted and not quoted - set(META["model_facts"])
    assert set(META["model_facts"]) <= facts.placeholders(text)  # no fact defined for nothing


def test_every_fact_holds_on_the_data_it_is_shown_with():
    verdicts = om.verdicts(META)
    assert not [name for name, ok in verdicts.items() if ok is False]
    # Only the H200 check may be missing, and only until the lead has run benchmarks/model_presets.py there.
    missing = {name for name, ok in verdicts.items() if ok is None}
    assert missing <= set(META["h200_facts"])
    assert not missing or not om.h200_rows()
    for check in META["checks"]:
        assert all(verdicts[name] for name in check["facts"]), check


def test_a_check_fails_when_its_data_says_otherwise(monkeypatch):
    data = {k: dict(v) for k, v in om.estimates().items()}
    data["llama3-8b-s2048-fused-ckpt"]["peak_bytes"] = data["llama3-8b-s2048-fused"]["peak_bytes"] - 20 * 2**30
    monkeypatch.setattr(om, "estimates", lambda: data)
    verdicts = om.verdicts(META)
    assert verdicts["ckpt_saving_2048"] is False and verdicts["impl_over_ckpt_2048"] is False


def test_the_recorded_estimates_are_what_the_engine_replays():
    """One entry recomputed (GPT-2 small, AMP, foreach: a full replay of a few seconds)."""
    from experiments.core.config import ExperimentConfig
    from experiments.estimate.estimator import estimate_or_refusal

    recorded = om.estimates()["gpt2-amp-foreach"]
    r = estimate_or_refusal(ExperimentConfig.from_dict(recorded["config"]), device_type="cuda")
    assert r["peak_bytes"] == recorded["peak_bytes"] and r["parameters"] == recorded["parameters"]
    step = max(p["peak_bytes"] for p in r["phases"] if p["phase"] == "optimizer_step" and p["step"] == 2)
    assert step == recorded["optimizer_step_peak_bytes"]


def test_a_quoted_value_that_rounds_to_zero_carries_no_sign():
    """-0.0001 % shown as "-0.00 %" would state a direction the data does not have; -0.5 keeps its sign."""
    from course.facts import formatted

    assert formatted({"format": ".2f"}, -0.0001) == "0.00"
    assert formatted({"format": ".2f"}, -0.5) == "-0.50" and formatted({"format": ".0%"}, -0.001) == "0%"


def test_a_recorded_difference_is_recomputed_from_its_bytes(monkeypatch):
    """The H200 rows store their differences beside the bytes; the page quotes the bytes' own (a stale stored figure,
    e.g. an estimate refreshed without its percentage, is never what a learner reads)."""
    rows = {c: dict(r) for c, r in om.h200_rows().items()}
    row = rows["vit-b16-amp-bf16"]
    row["peak_diff_percent"] = -1.2365  # stale: the estimate before the replay computed the reduction's buffer
    monkeypatch.setattr(om, "h200_rows", lambda: rows)
    spec = META["model_facts"]["h200_vit_diff"]
    want = 100 * (row["estimate_peak_bytes"] - row["measured_peak_bytes"]) / row["measured_peak_bytes"]
    assert om.value(spec) == pytest.approx(want, abs=1e-4)
    row["estimate_peak_bytes"] = int(row["measured_peak_bytes"] * 0.97)  # an estimate 3 % under
    assert om.verdicts(META)["h200_vit_diff"] is False


def test_the_band_is_read_off_the_trials_and_fails_where_they_say_otherwise(monkeypatch):
    """The trials batch by batch (lessons/yourmodel/band_h100.json): the figures by hand from their verdicts, and the
    sentence's claim (a larger batch ran where a smaller one did not) false on trials that are a threshold."""
    card = 1000
    trials = [
        {"batch": 10, "ran": True, "oom": None, "held_bytes": 990},
        {"batch": 11, "ran": False, "oom": None, "held_bytes": 1000 + 4_000_000},
        {"batch": 12, "ran": True, "oom": None, "held_bytes": 995},
        {"batch": 13, "ran": True, "oom": None, "held_bytes": 999},
        {"batch": 14, "ran": False, "oom": "CUDA out of memory", "held_bytes": 900},
        {"batch": 15, "ran": True, "oom": None, "held_bytes": 999},
    ]
    monkeypatch.setattr(om, "band", lambda: {"card_bytes": card, "trials": trials})
    got = {m: om.band_value(m) for m in ("first_failure", "runs_from", "runs_to", "larger_ran", "tried_above")}
    assert got == {"first_failure": 11, "runs_from": 12, "runs_to": 13, "larger_ran": 3, "tried_above": 4}
    assert om.band_value("over_card_mb_max") == 4.0 and om.band_value("oom_errors") == 1
    verdicts = om.verdicts(META)
    assert verdicts["band_oom_errors"] is False and verdicts["band_larger_ran"] is True
    for t in trials[2:]:
        t["ran"] = False  # a threshold: nothing above the first failure runs
    verdicts = om.verdicts(META)
    assert verdicts["band_larger_ran"] is False and verdicts["band_from"] is False
