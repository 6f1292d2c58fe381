"""The "Your model" page in both languages: it opens without an error, estimates a preset's tiny variant for a GPU
to the byte of the engine's estimate, searches what fits, runs it for real beside its estimate, and words a bad
name in one line."""

from __future__ import annotations

import pytest

from course import own_model as om
from experiments.core.config import ExperimentConfig
from experiments.core.units import fmt_bytes
from experiments.estimate.estimator import estimate
from tests.app.pages import open_page, run_until

TINY = {"ym_size": "tiny"}


def _cfg(**extra) -> ExperimentConfig:
    """What the page builds for the default preset's tiny variant (its own levers)."""
    data = {"model_source": "preset:llama3-8b:tiny", "batch": 2, "seq_len": 16, "precision": "bf16"}
    return ExperimentConfig.from_dict(
        {**data, "optimizer": "adamw", "optimizer_impl": "fused", "steps": 2, "timing_steps": 0, **extra}
    )


def _texts(at) -> str:
    return "\n".join([m.value for m in at.markdown] + [s.value for s in at.success] + [i.value for i in at.info])


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_page_estimates_a_tiny_preset_as_the_replay_does(lang):
    at = open_page("yourmodel", lang, state=TINY)
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert ":material/check_circle:" in _texts(at) and ":material/warning:" not in _texts(
        at
    )  # every checked sentence holds on the table it sits under
    shown = at.table[0].value  # every recorded estimate and every column in view, none behind a scroll
    rows = om.table_rows()
    assert shown.shape == (len(rows), len(rows[0]) - 1)  # the model and its precision share a column
    assert list(shown.iloc[:, 4]) == [f"{r['peak_gib']:.2f}" for r in rows]
    assert {f"{r['bytes_per_parameter']:.1f}" for r in rows} == set(shown.iloc[:, 5])
    # a precision as the picker words it, never an id such as amp_bf16
    assert not [m for m in shown.iloc[:, 0] if m.endswith(("· amp_bf16", "· bf16"))], list(shown.iloc[:, 0])
    at.button(key="ym.estimate").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert fmt_bytes(estimate(_cfg(), device_type="cuda")["peak_bytes"]) in _texts(at)  # the learner's GPU


def test_the_page_finds_what_fits_and_runs_a_tiny_preset_beside_its_estimate():
    at = open_page("yourmodel", "en", state={**TINY, "ym_card": "other", "ym_capacity": 0.86})
    at.button(key="ym.fits").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.table and "Cheapest for batch 2" in _texts(at)
    # the command that confirms the answer by real trials on a GPU: the page's model, card and levers
    (command,) = [c.value for c in at.code if c.value.startswith(".venv/bin/python -m experiments fits")]
    assert (
        command == ".venv/bin/python -m experiments fits --capacity-gib 0.86 --model-preset llama3-8b --tiny --measure"
    )
    at.button(key="ym.run").click().run()
    at = run_until(at, lambda a: "Measured peak" in _texts(a))
    assert "The estimate equals the measured peak." in _texts(at)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_what_fits_says_it_did_not_count_a_convolutions_workspace(lang):
    """A CNN's answer leaves out cuDNN's workspaces (measured only on a GPU): said beside it, naming the ops; a
    transformer's answer has nothing left out and says nothing."""
    card = {"ym_card": "other", "ym_capacity": 0.86}
    at = open_page("yourmodel", lang, state={"ym_preset": "resnet50", "ym_size": "tiny", **card})
    at.button(key="ym.fits").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    warned = [w.value for w in at.warning if "convolution_backward" in w.value]
    assert len(warned) == 1 and ("cuDNN" in warned[0]) and ("Not counted" in warned[0] or "未计入" in warned[0])
    at = open_page("yourmodel", lang, state={**TINY, **card})
    at.button(key="ym.fits").click().run()
    assert at.table and not [w.value for w in at.warning if "cuDNN" in w.value]


def test_a_model_type_transformers_does_not_have_is_one_line_naming_the_field():
    at = open_page("yourmodel", "en", state={"ym_source": "hf", "ym_model_type": "lama"})
    at.button(key="ym.estimate").click().run()
    assert not at.exception
    (err,) = [e.value for e in at.error]
    assert "cannot be built" in err and "close matches: llama" in err and "\n" not in err


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_model_types_head_is_chosen_on_the_page_and_reaches_the_estimate(lang):
    """T5 as an encoder-decoder, BERT as a sequence classifier: the page's source names the head (hf:NAME:HEAD) and
    its estimate is the engine's for that head."""
    shape = {"ym_o_layers": 2, "ym_o_hidden": 64, "ym_o_heads": 4, "ym_batch": 2, "ym_seq_len": 16}
    state = {"ym_source": "hf", "ym_model_type": "bert", "ym_head": "sequence_classification", **shape}
    at = open_page("yourmodel", lang, state=state)
    assert not at.exception and not at.error, [e.value for e in at.error]
    at.button(key="ym.estimate").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    source = "hf:bert:sequence_classification"
    cfg = _cfg(model_source=source, model_overrides="layers=2,hidden=64,heads=4", precision="bf16")
    assert fmt_bytes(estimate(cfg, device_type="cuda")["peak_bytes"]) in _texts(at)
    masked = estimate(cfg.replace(model_source="hf:bert"), device_type="cuda")["peak_bytes"]
    assert fmt_bytes(masked) not in _texts(at)  # not the masked LM a bare name would train


def test_a_bare_model_type_asks_for_what_its_own_head_needs():
    """ViT's first head is image classification: the page asks for an image size, not a sequence length."""
    at = open_page("yourmodel", "en", state={"ym_source": "hf", "ym_model_type": "vit"})
    assert not at.exception, [e.value for e in at.exception]
    keys = {n.key for n in at.number_input}
    assert "ym_image_size" in keys and "ym_seq_len" not in keys
    at.number_input(key="ym_o_layers").set_value(1).run()
    at.button(key="ym.estimate").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]  # ViT's own 224 px, the default here
    at = open_page("yourmodel", "en", state={"ym_source": "hf", "ym_model_type": "gpt2"})
    keys = {n.key for n in at.number_input}
    assert "ym_seq_len" in keys and "ym_image_size" not in keys


def test_torchvision_is_offered_and_says_what_to_install_where_it_does_not_import():
    from experiments.training.source_models import torchvision_status

    ok, why = torchvision_status()
    at = open_page("yourmodel", "en", state={"ym_source": "torchvision"})
    assert not at.exception and not at.error, [e.value for e in at.error]
    if ok:
        assert any(t.key == "ym_tv" for t in at.text_input)
    else:
        assert any(why in i.value for i in at.info)
        assert not any(t.key == "ym_tv" for t in at.text_input)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_fine_tuning_levers_from_a_shared_link_reach_the_estimate(lang):
    """A link with QLoRA, a rank and 8-bit AdamW: the page builds that configuration (bitsandbytes' optimizer with its
    one implementation), and its estimate is the engine's, with the trainable parameters beside it."""
    link = {"ym_size": "tiny", "ym_finetune": "qlora", "ym_lora_rank": "4", "ym_optimizer": "adamw8bit"}
    at = open_page("yourmodel", lang, query=link)
    assert not at.exception and not at.error, [e.value for e in at.error]
    at.button(key="ym.estimate").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    cfg = _cfg(finetune="qlora", lora_rank=4, optimizer="adamw8bit", optimizer_impl="default")
    est = estimate(cfg, device_type="cuda")
    captions = "\n".join(c.value for c in at.caption)
    assert fmt_bytes(est["peak_bytes"]) in _texts(at)
    assert f"{est['trainable_parameters']:,}" in captions and f"{est['parameters']:,}" in captions


def test_the_page_says_which_fine_tuning_method_runs_on_the_card():
    """On a card with room for everything, the first that runs is full training without checkpointing; each row's
    peak is the engine's answer (experiments/distributed/method_fits.py)."""
    from experiments.core.cards import overhead_bytes
    from experiments.distributed.method_fits import methods_on_card

    at = open_page("yourmodel", "en", state={**TINY, "ym_card": "other", "ym_capacity": 64.0})
    at.button(key="ym.methods").click().run()
    at = run_until(at, lambda a: any("first that runs" in s.value for s in a.success) or a.exception or a.error, 300)
    assert not at.exception and not at.error, [e.value for e in at.error]
    expected = methods_on_card(_cfg(), int(64 * 2**30), overhead_bytes())
    first = expected["first_that_runs"]
    assert (first["finetune"], first["checkpoint"]) == ("full", "none")
    assert any(fmt_bytes(first["peak_bytes"]) in s.value for s in at.success)
