"""What "What fits" answers, against the largest batch that really ran on a card (docs/benchmarks/fits-trials-*.jsonl:
trials on the NVIDIA H200 and on cards it emulated, benchmarks/fits_boundary.py). An answer above a measured boundary
would send a learner into an out-of-memory error: it fails here. One below it by more than one is too careful."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.core.cards import card, overhead_bytes
from experiments.core.config import ExperimentConfig
from experiments.distributed.model_fits import allocated_largest_batch, largest_that_runs
from experiments.estimate.estimator import preset_defaults

ROOT = Path(__file__).resolve().parents[2]


def boundaries() -> dict[tuple, int]:
    """(preset, card, levers, expandable) -> the largest batch that ran, where the next one was tried and failed."""
    tried: dict[tuple, dict[int, bool]] = {}
    for path in sorted((ROOT / "docs" / "benchmarks").glob("fits-trials-*.jsonl")):
        for line in path.read_text().splitlines():
            r = json.loads(line)
            if "error" in r:  # failed for another reason than memory: says nothing about the boundary
                continue
            key = (r["preset"], r["card"], json.dumps(r["levers"], sort_keys=True), r["expandable"])
            tried.setdefault(key, {})[r["batch"]] = r["ran"]
    out = {}
    for key, runs in tried.items():
        largest = max((b for b, ran in runs.items() if ran), default=0)
        if runs.get(largest + 1) is False:
            out[key] = largest
    return out


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
    # Above the boundary: a learner acting on these runs out of memory.
    # Traced on an H100 (docs/benchmarks/fits-boundary.md, last section): the replay sums each residual gradient out of
    # place (autograd does under any dispatch mode) where the real run sums it in place, so its blocks land elsewhere.
    ("vit-b16", "t4-16gb", None, False): "ViT AMP, checkpointing: answers 803; the replay's out-of-place gradient sums",
}


def _marks(key) -> list:
    preset, card_id, levers, expandable = key
    why = KNOWN_MISSES.get((preset, card_id, json.loads(levers).get("finetune"), expandable))
    return [pytest.mark.xfail(strict=True, reason=why)] if why else []


@pytest.mark.parametrize(
    "key",
    [pytest.param(k, marks=_marks(k)) for k in sorted(BOUNDARIES)],
    ids=lambda k: f"{k[0]}-{k[1]}-{json.loads(k[2]).get('finetune', 'full')}-{'exp' if k[3] else 'default'}",
)
def test_the_answer_is_the_measured_boundary_or_one_below(key):
    preset, card_id, levers, expandable = key
    source = f"preset:{preset}"
    cfg = ExperimentConfig.from_dict(
        {"model_source": source, **preset_defaults(source), **json.loads(levers), "device": "cuda", "steps": 2}
    )
    c = card(card_id)
    answer = largest_that_runs(cfg, c["total_bytes"], overhead_bytes(c), expandable=expandable)["largest_batch"]
    assert BOUNDARIES[key] - 1 <= answer <= BOUNDARIES[key], (key, answer, BOUNDARIES[key])


def test_the_allocated_peak_alone_answers_above_the_boundary_here():
    """Why the answer asks the allocator: the allocated peak of Llama-3-8B at batch 6 is within the H200, the run
    is not (the case of issue 28)."""
    source = "preset:llama3-8b"
    cfg = ExperimentConfig.from_dict({"model_source": source, **preset_defaults(source), "device": "cuda"})
    assert allocated_largest_batch(cfg, card("h200-141gb")["total_bytes"]) == 6
