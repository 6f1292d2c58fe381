"""The "Fine-tuning memory" lesson's numbers: every {{fact}} its texts and checks quote is defined and holds on the
data the page shows (lessons/finetune/estimates.json, the engine's replays; lessons/finetune/h200_methods.jsonl, the H200
runs of a plain peft/bitsandbytes loop), in both languages; a check fails when its data says otherwise; the exercise
grades what stands in the way."""

from __future__ import annotations

import inspect
import re

import pytest
from bitsandbytes.optim.optimizer import Optimizer8bit

from course import content, facts
from course import finetune_lesson as fl
from experiments.estimate import bnb_quirks

META = content.meta(fl.LESSON)
EXERCISE = META["exercise"]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_quoted_number_is_a_fact_of_the_lesson(lang):
    text, used = content.read_text(fl.LESSON, "lesson", lang)
    assert used == lang
    quoted = facts.placeholders(text) | {n for c in META["checks"] for n in facts.placeholders(c["text"][lang])}
    assert quoted and not quoted - facts.names(META["model_facts"])  # a paired fact's spread: name.lo, .hi, .rounds
    assert set(META["model_facts"]) <= facts.placeholders(text)  # no fact defined for nothing


def test_every_fact_holds_on_the_data_it_is_shown_with():
    verdicts = fl.verdicts(META)
    assert verdicts and all(ok is True for ok in verdicts.values()), verdicts
    for check in META["checks"]:
        assert all(verdicts[name] for name in check["facts"]), check


def test_a_check_fails_when_its_data_says_otherwise(monkeypatch):
    """Were QLoRA's step measured below LoRA's, "more than LoRA" would fail; were a method's estimate 5 % off, "within
    1 %" would."""
    rows = {k: dict(v) for k, v in fl.h200_rows().items()}
    rows["llama3-8b-qlora"]["measured_peak_bytes"] = rows["llama3-8b-lora"]["measured_peak_bytes"] - 2**30
    rows["llama3-8b-lora"]["peak_diff_percent"] = 5.0
    monkeypatch.setattr(fl, "h200_rows", lambda: rows)
    verdicts = fl.verdicts(META)
    assert verdicts["qlora_extra_gib"] is False and verdicts["max_peak_diff"] is False


def test_a_time_ratio_is_read_off_every_round_and_holds_only_if_every_round_does(monkeypatch):
    """ "Slower in every round" (qlora_time, min 1) fails when one round was faster; the median and spread are
    recomputed from the rounds' ratios, not read from the medians stored beside them."""
    import json
    import statistics

    original = fl._text
    data = json.loads(original(fl.ROUNDS_FILE))
    pair = data["pairs"]["qlora_over_lora"]
    ratios = pair["ratios"]
    shown = fl.facts(META)
    assert shown["qlora_time"] == format(statistics.median(ratios), ".2f")
    assert (shown["qlora_time.lo"], shown["qlora_time.hi"]) == (format(min(ratios), ".2f"), format(max(ratios), ".2f"))
    assert shown["qlora_time.rounds"] == str(len(ratios)) and fl.verdicts(META)["qlora_time"] is True
    pair["median"] = 9.0  # a stored derived figure is not trusted
    pair["ratios"] = [0.9, *ratios[1:]]
    monkeypatch.setattr(fl, "_text", lambda name: json.dumps(data) if name == fl.ROUNDS_FILE else original(name))
    assert fl.verdicts(META)["qlora_time"] is False
    assert fl.facts(META)["qlora_time.lo"] == "0.90" and fl.facts(META)["qlora_time"] != "9.00"


def test_the_recorded_rows_are_what_the_table_shows():
    """The table's Llama-3-8B rows: the measured and estimated peak of each method, largest first."""
    table = fl.table_rows()
    rows = {k: v for k, v in fl.h200_rows().items() if k.startswith("llama3-8b-")}
    assert len(table) == len(rows)
    assert [r["measured_gib"] for r in table] == sorted((r["measured_gib"] for r in table), reverse=True)
    assert {r["measured_gib"] for r in table} == {round(r["measured_peak_bytes"] / 2**30, 2) for r in rows.values()}


def test_the_driver_column_says_agreement_where_nvidia_smi_and_reserved_agree():
    """A row recorded before the reserved baseline was kept showed nvidia-smi 0.05 GiB *below* reserved: the two count
    from different moments. Within 0.1 GiB the column says they agree; a paged optimizer's managed memory stays a
    number; a recorded baseline is counted."""
    row = {"driver_used_bytes": 30 * 2**30 - 50 * 2**20, "reserved_bytes": 30 * 2**30}
    assert fl._driver_extra(row) == "≈ 0"
    assert fl._driver_extra({**row, "driver_used_bytes": 45 * 2**30}) == 15.0
    assert fl._driver_extra({**row, "driver_used_bytes": 30 * 2**30 - 300 * 2**20}) == -0.29
    assert (
        fl._driver_extra({**row, "driver_used_bytes": 30 * 2**30 - 300 * 2**20, "reserved_before_bytes": 2**28})
        == "≈ 0"
    )
    paged = [r for r in fl.table_rows() if r["levers"].get("optimizer") == "paged_adamw8bit"]
    assert paged and isinstance(paged[0]["driver_extra_gib"], float) and paged[0]["driver_extra_gib"] > 1


def test_the_exercise_names_each_obstacle():
    ok = {"methods": [{"runs": True, "peak_bytes": 1}]}
    llama = {"model_source": "preset:llama3-8b", "model_overrides": "", "seq_len": 2048}
    assert fl.exercise_verdict(EXERCISE, llama, ok) == (True, [])
    assert fl.exercise_verdict(EXERCISE, {**llama, "model_source": "preset:llama3-8b:tiny"}, ok) == (False, ["model"])
    assert fl.exercise_verdict(EXERCISE, {**llama, "model_overrides": "layers=2"}, ok) == (False, ["model"])
    assert fl.exercise_verdict(EXERCISE, {**llama, "seq_len": 512}, ok) == (False, ["seq"])
    assert fl.exercise_verdict(EXERCISE, llama, None) == (False, ["unchecked"])
    assert fl.exercise_verdict(EXERCISE, llama, {"methods": [{"runs": False}]}) == (False, ["too_big"])
    assert fl.exercise_verdict(EXERCISE, llama, {"methods": [{"runs": None}]}) == (False, ["unpredicted"])


def test_the_exercise_card_takes_qlora_with_checkpointing_and_not_qlora_alone():
    """The exercise's lesson, judged as the page judges it (the learner's own configuration, one row): QLoRA alone
    does not run on the 24 GB card at seq 2048 (its fp32 attention), with checkpointing it does."""
    from experiments.core.cards import card, overhead_bytes
    from experiments.core.config import ExperimentConfig
    from experiments.distributed.method_fits import methods_on_card
    from experiments.estimate.estimator import preset_defaults

    c = card(EXERCISE["card"])
    source = f"preset:{EXERCISE['preset']}"
    base = {**preset_defaults(source), "model_source": source, "device": "cuda", "steps": 2, "timing_steps": 0}
    verdicts = {}
    for checkpoint in ("none", "per_layer"):
        cfg = ExperimentConfig.from_dict({**base, "finetune": "qlora", "checkpoint": checkpoint})
        res = methods_on_card(cfg, c["total_bytes"], overhead_bytes(c), own_only=True)
        assert [(r["finetune"], r["checkpoint"]) for r in res["methods"]] == [("qlora", checkpoint)]
        verdicts[checkpoint] = fl.exercise_verdict(EXERCISE, cfg.to_dict(), res)
    assert verdicts == {"none": (False, ["too_big"]), "per_layer": (True, [])}


def test_a_ratio_recorded_on_another_gpu_is_read_from_that_recording(monkeypatch):
    """Offloading instead of checkpointing was timed on an H100 (h100_rounds.json): the facts read that file, a round
    where offloading was the faster side fails "slower than checkpointing", and an unknown recording is refused."""
    import json

    original = fl._text
    data = json.loads(original("h100_rounds.json"))
    assert data["device"].startswith("NVIDIA H100") and fl.verdicts(META)["offload_vs_ckpt_time"] is True
    data["pairs"]["offload_vs_ckpt"]["ratios"][0] = 0.95
    monkeypatch.setattr(fl, "_text", lambda name: json.dumps(data) if name == "h100_rounds.json" else original(name))
    assert fl.verdicts(META)["offload_vs_ckpt_time"] is False
    assert fl.verdicts(META)["offload_time"] is True  # the H200's rounds are another file
    with pytest.raises(ValueError, match="recording"):
        fl.rounds_summary({"rounds": "offload_alone", "recording": "../secrets.json"})


@pytest.mark.parametrize(
    "lang,rule", [("en", r"fewer than ([\d,]+) elements"), ("zh", r"元素少于 ([\d,]+) 个")], ids=["en", "zh"]
)
def test_the_paged_size_rule_the_lesson_states_is_the_one_the_estimate_and_bitsandbytes_use(lang, rule):
    """'a tensor of fewer than 100,000 elements keeps its state on the device': the number is bitsandbytes' own rule
    (Optimizer8bit.get_state_buffer, read from the installed release's source) and the estimate's."""
    text, _ = content.read_text(fl.LESSON, "lesson", lang)
    (stated,) = {int(n.replace(",", "")) for n in re.findall(rule, " ".join(text.split()))}
    (library,) = re.findall(r"p\.numel\(\) < ([\d.e]+)", inspect.getsource(Optimizer8bit.get_state_buffer))
    assert stated == bnb_quirks.PAGED_MIN_NUMEL == float(library)
