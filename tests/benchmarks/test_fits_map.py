"""benchmarks/fits_map.py: the verdict it prints per batch is the search's own (model_fits.runs_on_card), and its
allocated peak is the trace's by hand count."""

from __future__ import annotations

from benchmarks import fits_map
from benchmarks.boundary_trial import config
from experiments.core.cards import card, overhead_bytes
from experiments.distributed.model_fits import runs_on_card

LEVERS = {"model": "mlp", "layers": 8, "width": 4096, "precision": "fp32"}


def test_the_allocated_peak_is_the_most_alive_at_once():
    events = [("alloc", 1, 100), ("alloc", 2, 50), ("free", 1, 0), ("alloc", 3, 120), ("mark", 0, 0), ("free", 2, 0)]
    assert fits_map.allocated_peak(events) == 170


def test_each_verdict_is_the_searchs_own_on_both_sides_of_the_card():
    c = card("rtx-4060-8gb")
    budget = c["total_bytes"] - overhead_bytes(c)
    rows = list(fits_map.verdicts("builtin", "rtx-4060-8gb", LEVERS, [64, 65536]))
    assert [r[0] for r in rows] == [64, 65536]
    assert [r[4] for r in rows] == [True, False]  # 65536 x 4096 fp32 activations: 1 GiB a layer, eight layers
    assert [r[4] for r in rows] == [runs_on_card(config("builtin", LEVERS, b), budget) for b in (64, 65536)]
    assert rows[0][1] < budget < rows[1][1]
