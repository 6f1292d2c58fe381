"""What "What fits" answers, against the largest batch that really ran on a card (docs/benchmarks/fits-trials-*.jsonl:
trials on the NVIDIA H200 and on cards it emulated, benchmarks/fits_boundary.py). An answer above a measured boundary
would send a learner into an out-of-memory error: it fails here. One below it by more than one is too careful."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import boundary_trial
from experiments.core.cards import card, overhead_bytes
from experiments.core.config import ExperimentConfig
from experiments.distributed.model_fits import allocated_largest_batch, largest_that_runs
from experiments.estimate.estimator import preset_defaults

ROOT = Path(__file__).resolve().parents[2]


def boundaries() -> dict[tuple, int]:
    """(preset, card, levers, expandable) -> the largest batch that ran, where the next one was tried and failed. A
    cell's preset is a preset's name, a model source or "builtin" (benchmarks/boundary_trial.config)."""
    tried: dict[tuple, dict[int, bool]] = {}
    for path in sorted((ROOT / "docs" / "benchmarks").glob("fits-trials-*.jsonl")):
        for line in path.read_text().splitlines():
            r = json.loads(line)
            if "error" in r:  # failed for another reason than memory: says nothing about the boundary
                continue
            key = (r["preset"], r["card"], json.dumps(r["levers"], sort_keys=True), r["expandable"])
            tried.setdefault(key, {})[r["batch"]] = r["ran"]
            if r.get("transformers"):
                TRANSFORMERS[key] = r["transformers"]
    out = {}
    for key, runs in tried.items():
        largest = max((b for b, ran in runs.items() if ran), default=0)
        if runs.get(largest + 1) is False:
            out[key] = largest
    return out


TRANSFORMERS: dict[tuple, str] = {}  # the release a cell's trials ran with, where they recorded it
BOUNDARIES = boundaries()


def test_the_recorded_boundaries_are_read():
    assert (
        BOUNDARIES[
            (
                "llama3-8b",
                "h200-141gb",
                json.dumps({"checkpoint": "none", "optimizer_impl": "fused", "precision": "bf16"}, sort_keys=True),
                False,
            )
        ]
        == 5
    )


# Misses measured on an emulated card and not yet explained (docs/benchmarks/fits-boundary.md): each fails here
# until the answer moves, then the strict mark fails and comes off.
_CLOSE = "the reserved peak after giving cached segments back comes within the margin of the card: too close to call"
KNOWN_MISSES = {
    ("bert-base", "a100-40gb", None, False): "BERT bf16 foreach: answers 139, 141 ran (two below: too careful)",
    ("bert-base", "a100-40gb", None, True): "BERT bf16 foreach, expandable: answers 155, 157 ran (two below)",
    ("bert-base", "rtx-4090-24gb", None, True): "BERT bf16 foreach, expandable: answers 90, 92 ran (two below)",
    ("vit-b16", "rtx-3060-12gb", None, False): "ViT fp32 foreach: answers 84, 86 ran (two below)",
    ("vit-b16", "rtx-4060-8gb", None, False): "ViT fp32 fused, checkpointing: answers 285, 287 ran (two below)",
    (
        "mistral-7b",
        "a100-80gb",
        None,
        False,
    ): f"Mistral-7B bf16 foreach, checkpointing: answers 13, 23 ran ({_CLOSE})",
    ("gpt2", "h200-141gb", None, True): "GPT-2 fp32 fused on the H200 itself, expandable: answers 81, 83 ran",
    ("bert-base", "h200-141gb", None, False): "BERT AMP bf16, checkpointing, on the H200: answers 658, 687 ran",
    ("bert-base", "h200-141gb", None, True): "BERT on the H200 itself, expandable: answers 803, 815 ran",
    ("resnet50", "h200-141gb", None, False): "ResNet-50 AMP bf16 fused on the H200 itself: answers 2907, 3296 ran",
    # Above the boundary: a learner acting on these runs out of memory.
    # Traced on an H100 (docs/benchmarks/fits-boundary.md, last section): the replay sums each residual gradient out of
    # place (autograd does under any dispatch mode) where the real run sums it in place, so its blocks land elsewhere;
    # summed in place, with cuDNN's workspaces by rule, it answered 828 ("Two steps tried and not kept").
    ("vit-b16", "t4-16gb", None, False): "ViT AMP, checkpointing: answers 803; the replay's out-of-place gradient sums",
    # On the H200 itself (docs/benchmarks/fits-boundary.md, "The H200's own card"): 61 ran out of memory asking for
    # 14.89 GiB with 26.11 GiB reserved but free; 60 ran. Traced ("Mistral-7B on the H200 at 60 and 61"): the same
    # bytes, another layout (a tie between equal free blocks, then the replay's out-of-place gradient sum).
    ("mistral-7b", "h200-141gb", None, False): "Mistral-7B bf16, checkpointing, H200: answers 64 (61 with the "
    "trials' transformers 5.17), 60 ran",
    # Measured 2026-12-07 on an H100 (docs/benchmarks/fits-boundary.md, "The grid resumed"): too careful, none above.
    ("resnet50", "rtx-3060-12gb", None, False): "ResNet-50 bf16 foreach: answers 236, 250 ran (the margin on reserved)",
    ("resnet50", "t4-16gb", None, False): "ResNet-50 bf16 foreach: answers 303, 333 ran (the margin on reserved)",
    ("vit-b16", "a100-40gb", None, False): "ViT AMP bf16 fused: answers 514, 526 ran",
    ("vit-b16", "rtx-4060-8gb", None, True): "ViT fp32 fused, checkpointing, expandable: answers 311, 319 ran",
    ("vit-b16", "rtx-4090-24gb", None, False): "ViT bf16 fused, checkpointing: answers 2138, 2171 ran",
}


# Cells the repository had no preset or plan of (docs/benchmarks/fits-plan-unseen.json, trials on an H100): the
# answers where they were not tuned. Measured 2026-12-06.
_WORKSPACE = "cuDNN's convolution workspaces are not in the search (measured only on a GPU, per signature)"
KNOWN_MISSES |= {
    ("builtin", "rtx-3060-12gb", None, False): f"CNN 8 x 128 at 224 px, bf16: answers 192, 181 ran ({_WORKSPACE})",
    ("builtin", "rtx-3060-12gb", None, True): "CNN 8 x 128 at 224 px, bf16, expandable: answers 205, 208 ran",
    ("builtin", "rtx-4060-8gb", None, False): "CNN 6 x 64 at 128 px, strict fp32: answers 406, 412 ran",
    ("builtin", "rtx-4060-8gb", None, True): "CNN 6 x 64 at 128 px, strict fp32, expandable: answers 429, 436 ran",
    ("builtin", "t4-16gb", None, False): "transformer 12 x 768, AMP bf16: answers 144, 148 ran",
    ("builtin", "t4-16gb", None, True): "transformer 12 x 768, AMP bf16, expandable: answers 149, 151 ran",
    ("hf:gpt_neox:causal_lm", "rtx-4060-8gb", None, False): "GPT-NeoX 6 x 768, AMP fp16: answers 4, 7 ran",
    ("hf:bert:sequence_classification", "t4-16gb", None, False): "BERT classifier AMP fp16: answers 552, 587 ran",
    ("hf:bert:sequence_classification", "t4-16gb", None, True): "BERT classifier, expandable: answers 621, 629 ran",
    (
        "hf:swin:image_classification",
        "rtx-3060-12gb",
        None,
        False,
    ): "Swin-T AMP bf16: answers 156, 167 ran (128 while its learned bias sent the replay to the math path)",
    ("hf:swin:image_classification", "rtx-3060-12gb", None, True): "Swin-T AMP bf16, expandable: answers 167, 170 ran",
}


# Models whose memory changed between the transformers release of their trials and later ones: their boundary holds
# for that release only (the other cells' answers were the same with 5.17 and 5.25).
CODE_CHANGED = {
    "hf:t5:seq2seq_lm": "T5's position bias reaches attention as a contiguous mask since transformers 5.2x (CUDA's "
    "math path before: experiments/estimate/cuda_kernels.py); it answered 19 with 5.17 and 33 with 5.25",
}


def _marks(key) -> list:
    preset, card_id, levers, expandable = key
    recorded, installed = TRANSFORMERS.get(key), boundary_trial.version("transformers")
    if preset in CODE_CHANGED and recorded and recorded != installed:
        why = f"{CODE_CHANGED[preset]}: measured with transformers {recorded}, installed {installed}"
        return [pytest.mark.skip(reason=why)]
    why = KNOWN_MISSES.get((preset, card_id, json.loads(levers).get("finetune"), expandable))
    return [pytest.mark.xfail(strict=True, reason=why)] if why else []


@pytest.mark.parametrize(
    "key",
    [pytest.param(k, marks=_marks(k)) for k in sorted(BOUNDARIES)],
    ids=lambda k: f"{k[0]}-{k[1]}-{json.loads(k[2]).get('finetune', 'full')}-{'exp' if k[3] else 'default'}",
)
def test_the_answer_is_the_measured_boundary_or_one_below(key):
    preset, card_id, levers, expandable = key
    cfg = boundary_trial.config(preset, json.loads(levers))
    c = card(card_id)
    answer = largest_that_runs(cfg, c["total_bytes"], overhead_bytes(c), expandable=expandable)["largest_batch"]
    assert BOUNDARIES[key] - 1 <= answer <= BOUNDARIES[key], (key, answer, BOUNDARIES[key])


def test_the_allocated_peak_alone_answers_above_the_boundary_here():
    """Why the answer asks the allocator: the allocated peak of Llama-3-8B at batch 6 is within the H200, the run
    is not (the case of issue 28)."""
    source = "preset:llama3-8b"
    cfg = ExperimentConfig.from_dict({"model_source": source, **preset_defaults(source), "device": "cuda"})
    assert allocated_largest_batch(cfg, card("h200-141gb")["total_bytes"]) == 6
