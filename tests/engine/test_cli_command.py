"""The command a page shows to repeat its configuration in a terminal: parsed as the command line parses it, it gives
the same configuration back, for built-in families, presets (tiny and full, levers at and off their defaults), Hugging
Face types with a head and shape overrides, fine-tuning levers and the switches; a torchvision model by its flag."""

from __future__ import annotations

import shlex

import pytest

from experiments import cli
from experiments.cli_command import fits_command, model_flags
from experiments.core.config import ExperimentConfig
from experiments.core.model_sources import preset_defaults

CONFIGS = [
    {},
    {"model": "transformer", "layers": 4, "width": 512, "seq_len": 256, "precision": "amp_bf16", "batch": 3},
    {
        "model": "cnn",
        "width": 64,
        "image_size": 64,
        "checkpoint": "per_layer",
        "optimizer_impl": "foreach",
        "inplace": True,
    },
    {"model_source": "preset:gpt2", "batch": 5},
    {"model_source": "preset:llama3-8b", "precision": "fp32", "optimizer_impl": "fused", "checkpoint": "per_layer"},
    {"model_source": "preset:gpt2:tiny", "zero_grad_to_none": False, "accum": 2, "batch": 4},
    {"model_source": "hf:qwen2:causal_lm", "model_overrides": "layers=2,hidden=256", "seq_len": 128},
    {
        "model_source": "preset:mistral-7b",
        "finetune": "qlora",
        "lora_rank": 32,
        "lora_targets": "all_linear",
        "double_quant": False,
        "checkpoint": "per_layer",
        "checkpoint_every": 2,
    },
]

SET_ELSEWHERE = ("device", "steps", "timing_steps", "force")


def as_the_page_has_it(given: dict) -> dict:
    """A preset opens with its own levers (the page and the command line both start from them)."""
    source = given.get("model_source", "")
    return ExperimentConfig.from_dict({**(preset_defaults(source) if source else {}), **given}).to_dict()


def parsed(command: str) -> dict:
    words = shlex.split(command)
    assert words[:4] == [".venv/bin/python", "-m", "experiments", "fits"] and words[-1] == "--measure"
    args = cli.build_parser().parse_args(words[3:])
    return cli._config(args).to_dict()


@pytest.mark.parametrize("given", CONFIGS, ids=lambda c: c.get("model_source") or c.get("model", "mlp"))
def test_the_command_gives_the_configuration_back(given):
    cfg = as_the_page_has_it(given)
    command = fits_command(cfg, card="rtx-4090-24gb")
    assert "--card rtx-4090-24gb" in command
    back = parsed(command)
    assert {k: v for k, v in back.items() if k not in SET_ELSEWHERE} == {
        k: v for k, v in cfg.items() if k not in SET_ELSEWHERE
    }


def test_a_card_of_another_size_and_a_model_of_ones_own_code():
    cfg = as_the_page_has_it({"model_source": "preset:gpt2"})
    assert (
        fits_command(cfg, capacity_gib=11.5)
        == ".venv/bin/python -m experiments fits --capacity-gib 11.5 --model-preset gpt2 --measure"
    )
    assert fits_command({**cfg, "model_source": "import:pkg.mod:make"}, card="t4-16gb") is None


def test_a_torchvision_model_is_named_by_its_flag():
    # (torchvision does not import beside the CPU build of torch, so its configuration is not built here)
    assert model_flags("torchvision:resnet18") == ["--torchvision", "resnet18"]
