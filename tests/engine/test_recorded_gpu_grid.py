"""The CUDA estimate, computed here without a GPU, against the allocated peaks an NVIDIA H100 measured for a seeded
grid of built-in configurations (docs/benchmarks/estimate-grid-h100-seed4711.json, `benchmarks/estimate_grid.py
--device cuda --n 40 --seed 4711`). The MLP rows take no kernel scratch that a rule does not give, so their estimate
is the measured peak (to the byte in 13 of 14; an AMP fp16 row 5 KiB over, 0.0011 %); among them the per-layer-checkpointed AMP rows peak in the forward pass, at `mse_loss`, whose
CUDA kernel computes the elementwise loss into a buffer of its own (experiments/estimate/cuda_kernels.py).
The CNN rows need the convolutions' workspaces, which the grid's device measured and did not keep: not read here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.core.config import ExperimentConfig
from experiments.estimate.estimator import estimate

GRID = Path(__file__).resolve().parents[2] / "docs" / "benchmarks" / "estimate-grid-h100-seed4711.json"
ROWS = json.loads(GRID.read_text())["rows"]
MIB = 2**20


def _replay(row) -> dict:
    cfg = ExperimentConfig.from_dict({**row["config"], "device": "cuda", "steps": 2, "timing_steps": 0})
    return estimate(cfg, device_type="cuda", method="replay")


MLP = [r for r in ROWS if r["config"].get("model", "mlp") == "mlp"]


@pytest.mark.filterwarnings("ignore:Paged optimizers are not supported on CPU")
@pytest.mark.parametrize("row", MLP, ids=lambda r: f"draw{r['draw']}")
def test_an_mlp_row_is_estimated_at_the_peak_it_measured(row):
    est, measured = _replay(row), round(row["measured_mib"] * MIB)
    assert abs(est["peak_bytes"] - measured) <= 2e-5 * measured, (row["config"], est["peak_bytes"] - measured)
    assert est["peak_phase"] == row["measured_phase"]
    if row["config"].get("checkpoint") == "per_layer":  # the loss's buffer holds these peaks: to the byte
        assert est["peak_bytes"] == measured


def test_the_grid_has_the_rows_the_loss_rule_was_found_on():
    # Per-layer checkpointing under AMP: the forward pass peaks in the loss, one [batch, width] fp32 buffer over the
    # tensors (640 x 384 x 4 and 688 x 384 x 4 bytes, and 1 KiB of the mean's partial sums and semaphores).
    found = [
        r for r in MLP if r["config"].get("checkpoint") == "per_layer" and "amp" in r["config"].get("precision", "")
    ]
    assert {r["draw"] for r in found} >= {14, 21}
    assert all(r["measured_phase"] == "forward" for r in found if r["draw"] in (14, 21))
    assert len(MLP) >= 12
