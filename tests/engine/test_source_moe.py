"""Model types that a sweep of the command line (benchmarks/source_sweep.py) found off, named without need, or
answered with a traceback: each estimate here equals a real CPU run in every phase and category, or is one line.

- transformers' MoE experts (grouped_mm) in fp32 and under AMP: named as "cannot be predicted" until the CPU estimate
  answered aten._grouped_mm as the CPU kernel does (experiments/estimate/cpu_kernels.py);
- AMP fp16 with a fused optimizer: the step's peak was 8 bytes under the real run's (the replay's scaler unscaled
  the gradients itself where GradScaler hands the scale to the fused kernel);
- a forced run of a model that raises, a composite or per-layer config: a traceback before, one line now.
"""

from __future__ import annotations

import pytest

from experiments.core.config import ConfigError, ExperimentConfig
from experiments.estimate import quirks
from experiments.estimate.cpu_kernels import meta_grouped_mm_takes_fp32
from experiments.estimate.estimator import estimate_or_refusal, preset_defaults
from experiments.estimate.replay import replay
from experiments.estimate.unpredictable import CannotPredict
from experiments.measure.run import run_experiment

SMALL = "layers=2,hidden=64,heads=4,kv_heads=4,intermediate=128,vocab=256"


def rows(phases) -> list[tuple]:
    return [(p["step"], p["micro"], p["phase"], p["allocated_bytes"], p["peak_bytes"]) for p in phases]


def same(cfg: ExperimentConfig) -> dict:
    fake, real = replay(cfg), run_experiment(cfg, history=False)
    assert real["oom"] is None and real["peak_bytes"] > 0
    assert rows(fake["phases"]) == rows(real["phases"])
    assert fake["categories"] == real["breakdown"]
    assert fake["steady"] == real["breakdown_steady"]
    return fake


def hf(source: str, overrides: str = SMALL, **levers) -> ExperimentConfig:
    base = {"model_source": source, "model_overrides": overrides, "device": "cpu", "steps": 2, "timing_steps": 0}
    base |= {"batch": 2, "seq_len": 16, "precision": "fp32", "optimizer": "adamw"}
    return ExperimentConfig.from_dict({**base, **levers})


@pytest.fixture
def disabled():
    yield quirks.DISABLED.add
    quirks.DISABLED.clear()


@pytest.mark.parametrize(
    "source,precision",
    [("hf:olmoe", "fp32"), ("hf:olmoe", "amp_bf16"), ("hf:qwen3_moe", "fp32")],
)
def test_moe_experts_in_fp32_and_amp_replay_like_a_real_cpu_run(source, precision):
    cfg = hf(source, SMALL + ",experts=8", precision=precision)
    r = estimate_or_refusal(cfg, device_type="cpu")
    assert r["predicted"] is True, r.get("cannot_predict")
    same(cfg)


def test_without_the_cpu_answer_grouped_mm_in_fp32_is_predicted_only_where_torch_takes_it(disabled):
    """Up to torch 2.14 the fake kernel refuses fp32 (so the CPU answer is needed); from 2.15 it takes it, and the
    replay is the one the CPU answer gives."""
    with_answer = replay(hf("hf:olmoe"))
    disabled("grouped_mm_cpu")
    if meta_grouped_mm_takes_fp32():
        assert rows(replay(hf("hf:olmoe"))["phases"]) == rows(with_answer["phases"])
        return
    with pytest.raises(CannotPredict) as e:
        replay(hf("hf:olmoe"))
    assert e.value.info["op"] == "aten._grouped_mm.default"


def test_cpu_grouped_mm_sizes_match_the_real_kernel_in_every_layout():
    """The four layouts (2-D/3-D inputs, with offsets where a side is 2-D), forward and backward's: the real CPU
    kernel's output, size and bytes, against the size the replay answers."""
    import torch

    from experiments.estimate.cpu_kernels import grouped_mm_size

    offs = torch.tensor([3, 8], dtype=torch.int32)
    for a, b, o in [
        (torch.randn(8, 16), torch.randn(2, 16, 4), offs),
        (torch.randn(16, 8).t().contiguous().t(), torch.randn(8, 4), offs),
        (torch.randn(2, 5, 16), torch.randn(16, 8), offs),
        (torch.randn(2, 5, 16), torch.randn(2, 16, 4), None),
    ]:
        if a.dim() == 2 and b.dim() == 2:
            a = torch.randn(16, 8)  # grad of the weight: (K, M) x (M, N) grouped over M
        out = torch._grouped_mm(a, b, offs=o)
        assert list(out.shape) == grouped_mm_size(a, b, o) and out.is_contiguous()


@pytest.mark.parametrize("preset", ["llama3-8b", "gpt2"])
def test_amp_fp16_with_a_fused_optimizer_replays_like_a_real_cpu_run(preset):
    source = f"preset:{preset}:tiny"
    base = {"model_source": source, "device": "cpu", "steps": 2, "timing_steps": 0, **preset_defaults(source)}
    same(ExperimentConfig.from_dict({**base, "precision": "amp_fp16", "optimizer": "adamw", "optimizer_impl": "fused"}))


def test_a_forced_run_of_a_model_that_raises_is_one_line(capsys):
    """Bamba at 2 layers has no attention layer (its attention sits at layer 4 and later); transformers then fails
    in its cache. The estimate names it; forced, the real run fails there too: one line, exit status 4."""
    from experiments.cli import main

    args = ["--model-type", "bamba", "--seq-len", "16", "--batch", "2", "--device", "cpu", "--steps", "2"]
    args += ["--timing-steps", "0", "--optimizer", "adamw"] + [x for kv in SMALL.split(",") for x in ("--set", kv)]
    assert main(["estimate", *args]) == 3
    assert "a real run would too" in capsys.readouterr().out
    assert main(["run", *args, "--force", "--json"]) == 4
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error")]
    assert len(err) == 1 and err[0].startswith("error: the real run of this model raised ValueError: ")
    assert "Traceback" not in err[0]


def test_a_default_kv_heads_the_heads_do_not_take_says_what_to_set():
    from experiments.training.models import spec_for

    with pytest.raises(ConfigError) as e:
        spec_for(hf("hf:qwen2", "layers=2,hidden=64,heads=4"))
    assert "kv_heads 32 must divide heads 4" in str(e.value) and "set kv_heads to a divisor of 4" in str(e.value)


def test_a_composite_config_reads_its_text_part_and_a_per_layer_config_is_read_safely():
    """Emu3 keeps its vocabulary in its text part; Dots3-Note's heads are per layer (a global read raises)."""
    from transformers import AutoConfig

    from experiments.training import hf_models

    emu3 = AutoConfig.for_model("emu3")
    assert hf_models.vocab_size(emu3) == emu3.text_config.vocab_size
    kwargs = hf_models.config_kwargs("dots3_note_text", {}, {"heads": 4, "kv_heads": 4})
    assert kwargs["num_attention_heads"] == 4
