"""The heads a Hugging Face model trains with beyond a language model's: an encoder-decoder (`seq2seq_lm`: T5, BART,
Marian) and a sequence classifier (`sequence_classification`), named as `hf:NAME:HEAD`. Each replays like a real CPU
step to the byte; an encoder-decoder's overrides reach both stacks; the masks a model makes itself (quirk 13) are
read as a real run reads them, and without that the replay builds a mask the real run never does."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import DataDependentOutputException, FakeTensorMode

from experiments.core.config import ConfigError, ExperimentConfig
from experiments.core.errors import CannotPredict
from experiments.core.model_sources import task_of
from experiments.estimate import quirks
from experiments.estimate.replay import replay
from experiments.estimate.uniform_masks import UniformValues, value_of
from experiments.measure.run import run_experiment
from experiments.training.source_models import source_spec

SMALL = "layers=2,hidden=64,heads=4,intermediate=128,vocab=256"


def cfg_of(source: str, overrides: str = SMALL, **levers) -> ExperimentConfig:
    base = {"model_source": source, "model_overrides": overrides, "device": "cpu", "steps": 2, "timing_steps": 0}
    base |= {"batch": 2, "seq_len": 16, "precision": "fp32", "optimizer": "adamw"}
    return ExperimentConfig.from_dict(base | levers)


def rows(phases) -> list[tuple]:
    return [(p["step"], p["micro"], p["phase"], p["allocated_bytes"], p["peak_bytes"]) for p in phases]


def same(cfg: ExperimentConfig):
    fake, real = replay(cfg), run_experiment(cfg, history=False)
    assert real["oom"] is None and real["peak_bytes"] > 0
    assert rows(fake["phases"]) == rows(real["phases"])
    assert fake["categories"] == real["breakdown"]
    return fake, real


@pytest.fixture
def disabled():
    yield quirks.DISABLED.add
    quirks.DISABLED.clear()


@pytest.mark.parametrize(
    "source,levers",
    [
        ("hf:t5", {}),
        ("hf:bart:seq2seq_lm", {"precision": "amp_bf16"}),
        ("hf:marian:seq2seq_lm", {"checkpoint": "per_layer"}),
        ("hf:bert:sequence_classification", {}),
        ("hf:gpt2:sequence_classification", {"precision": "amp_bf16"}),
        ("hf:llama:sequence_classification", {"checkpoint": "per_layer"}),
    ],
)
def test_a_head_replays_like_a_real_cpu_run(source, levers):
    fake, real = same(cfg_of(source, **levers))
    assert real["breakdown"]["gradients"] > 0
    # A replay that ignored the sequence would pass the equality above.
    assert replay(cfg_of(source, **levers, seq_len=32))["peak_bytes"] > fake["peak_bytes"]


def test_a_regression_head_trains_on_float_targets():
    """One output (classes=1): transformers trains it with MSE, so the target is a float per sequence."""
    same(cfg_of("hf:llama:sequence_classification", SMALL + ",classes=1"))


def test_the_head_is_the_named_one_else_the_first_the_model_has():
    assert source_spec("hf:t5", SMALL).task == "seq2seq_lm"  # T5 has no other head
    assert source_spec("hf:bert", SMALL).task == "masked_lm"  # as before: how BERT is pre-trained
    assert source_spec("hf:bert:sequence_classification", SMALL).task == "sequence_classification"
    assert task_of("hf:bert:sequence_classification") == "sequence_classification"
    assert task_of("hf:bert") is None  # only the library knows


@pytest.mark.parametrize(
    "source,needle",
    [
        ("hf:bert:seq2seq_lm", "bert has no seq2seq_lm head here; it has masked_lm"),
        ("hf:bert:regression", "one of masked_lm, causal_lm, image_classification, seq2seq_lm"),
        ("preset:gpt2:seq2seq_lm", "only hf:NAME a head"),
    ],
)
def test_a_head_that_does_not_exist_is_one_line_naming_the_field(source, needle):
    with pytest.raises(ConfigError) as e:
        source_spec(source, SMALL)
    assert e.value.field == "model_source" and needle in str(e.value)


def test_an_encoder_decoders_overrides_reach_both_stacks():
    bart = source_spec("hf:bart:seq2seq_lm", "layers=3,heads=2,intermediate=96,hidden=32,vocab=128").config
    assert (bart.encoder_layers, bart.decoder_layers) == (3, 3)
    assert (bart.encoder_attention_heads, bart.decoder_attention_heads) == (2, 2)
    assert (bart.encoder_ffn_dim, bart.decoder_ffn_dim) == (96, 96)
    t5 = source_spec("hf:t5", "layers=3,vocab=128").config
    assert (t5.num_layers, t5.num_decoder_layers) == (3, 3)
    assert t5.decoder_start_token_id == t5.pad_token_id  # as T5's published configs: the decoder starts with pad


def test_quirk_masks_a_model_makes_itself(disabled):
    """BART's decoder makes its own all-ones mask; a real run finds it pads nothing and gives SDPA is_causal. Without
    the quirk the replay cannot ask, and builds a 4-D mask in every forward."""
    cfg = cfg_of("hf:bart:seq2seq_lm")
    _fixed, real = same(cfg)
    disabled("uniform_masks")
    try:
        broken = replay(cfg)
    except CannotPredict as e:  # transformers before 5.2x reads LayerDrop's draw in every layer: nothing predicted
        assert "reads a tensor's value" in str(e) and "modeling_bart.py" in str(e)
        return
    real_fwd = [p["peak_bytes"] for p in real["phases"] if p["phase"] == "forward"]
    broken_fwd = [p["peak_bytes"] for p in broken["phases"] if p["phase"] == "forward"]
    assert all(b > r for b, r in zip(broken_fwd, real_fwd, strict=True))


def test_uniform_values_are_known_until_written_and_other_values_stay_unknown():
    with FakeTensorMode(), UniformValues():
        mask = torch.ones(2, 8).to(torch.bool)
        assert bool(mask.sum() == mask.numel()) and value_of(~mask) is False
        assert value_of((1.0 - mask.float()).masked_fill(mask, -1.0)) == -1.0
        assert value_of(mask[:, 2:].unsqueeze(1).expand(2, 3, 6)) is True
        data = torch.randn(2, 8)
        with pytest.raises(DataDependentOutputException):
            bool((data > 0).all())
        mask[0, 0] = False  # written in place: mixed values from now on
        with pytest.raises(DataDependentOutputException):
            bool(mask.all())


def test_a_random_numbers_range_answers_the_comparisons_all_its_values_answer_alike():
    """LayerDrop at 0 (`torch.rand([]) < 0.0`, BART's encoder in transformers 5.17) skips no layer in any real run;
    a LayerDrop above 0 skips at random, so the replay cannot know, as before."""
    with FakeTensorMode(), UniformValues():
        draw = torch.rand([])
        assert not bool(draw < 0.0) and not bool(draw < 0) and bool(draw >= 0.0) and bool(draw < 1.0)
        assert not bool(draw > 1.0) and bool(draw <= 1)
        with pytest.raises(DataDependentOutputException):
            bool(draw < 0.1)
        draw.mul_(3.0)  # written in place: the range is gone
        with pytest.raises(DataDependentOutputException):
            bool(draw < 1.0)
