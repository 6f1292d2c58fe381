"""Which way of fine-tuning a model runs on a card, at the learner's own batch and sequence length: full training,
LoRA, QLoRA and LoRA on an 8-bit base, each with and without checkpointing every layer, judged as "What fits" judges
a batch (experiments/distributed/model_fits.py: the caching allocator's own rules over the replay's allocation trace,
with what the process holds outside the allocator), and the first that runs in the order of least compromise: full
before adapters, adapters on the model's own weights before quantized ones, no recomputation before checkpointing."""

from __future__ import annotations

import math
import time

from ..core.config import ExperimentConfig
from ..core.errors import CannotPredict
from ..core.finetune import BNB_OPTIMIZERS
from .fits_traces import phase_rows, shapes
from .model_fits import largest_that_runs, runs_on_card

# Least compromise first: what a learner gives up grows down the list (all weights trained, then adapters on exact
# weights, then on quantized ones; recomputation last within each).
METHODS = ("full", "lora", "qlora", "int8")
CHECKPOINTS = ("none", "per_layer")


def method_config(cfg: ExperimentConfig, method: str, checkpoint: str) -> ExperimentConfig:
    levers = {"finetune": method, "checkpoint": checkpoint, "checkpoint_every": 1}
    if checkpoint == "none":
        levers["offload_activations"] = False
    if cfg.optimizer in BNB_OPTIMIZERS:
        levers["optimizer_impl"] = "default"
    return cfg.replace(**levers)


def methods_on_card(
    cfg: ExperimentConfig,
    card_bytes: int,
    overhead_bytes: int,
    progress=None,
    own_only: bool = False,
    largest: bool = False,
) -> dict:
    """One row per method x checkpointing: its estimated peak (or what cannot be predicted) and whether it runs on a
    card of `card_bytes` whose process holds `overhead_bytes` outside the allocator; and the first that runs.
    `own_only`: one row, cfg itself with all its levers (an exercise's check of the learner's own choice). `largest`:
    each predicted row also gets the largest batch it runs at on the card (the default allocator's, as "What fits"
    searches it: model_fits.largest_that_runs)."""
    t0 = time.perf_counter()
    budget = max(0, card_bytes - overhead_bytes)
    rows, traces = [], {}
    combos = [(cfg.finetune, cfg.checkpoint)] if own_only else [(m, c) for m in METHODS for c in CHECKPOINTS]
    for method, checkpoint in combos:
        choice = cfg if own_only else method_config(cfg, method, checkpoint)
        row = {"finetune": method, "checkpoint": checkpoint, "runs": None, "peak_bytes": None}
        try:
            # The trace the allocator check reads gives the peak too (drawn from shallow replays for a deep model).
            peak = max(p["peak_bytes"] for p in phase_rows(choice, None, traces))
        except CannotPredict as e:
            row["cannot_predict"] = e.info["message"]
        else:
            row["peak_bytes"] = peak
            row["trainable_parameters"] = sum(math.prod(shape) for shape, _ in shapes(choice, traces))
            row["runs"] = peak <= budget and runs_on_card(choice, budget, False, None, traces)
            if largest:
                row["largest_batch"] = largest_that_runs(choice, card_bytes, overhead_bytes)["largest_batch"]
        rows.append(row)
        if progress is not None:
            progress(len(rows), len(combos))
    first = next((r for r in rows if r["runs"]), None)
    return {
        "config": cfg.to_dict(),
        "capacity_bytes": card_bytes,
        "overhead_bytes": overhead_bytes,
        "methods": rows,
        "first_that_runs": first,
        "seconds": round(time.perf_counter() - t0, 1),
    }
