"""The tensor census of a leak run: the diff between the last two steps finds exactly the group that leaks,
with its bytes per step as counted by hand, and names who holds it."""

import pytest
import torch

from experiments.labs.leaks import run_leak
from experiments.measure import census
from experiments.measure.tracker import MemoryTracker

BATCH, WIDTH, LAYERS = 16, 64, 2
ONE_OUTPUT = BATCH * WIDTH * 4  # one (batch, width) fp32 tensor


def _grown(scenario):
    r = run_leak(scenario, steps=4, device="cpu", batch=BATCH, width=WIDTH, layers=LAYERS)
    c = r["census"]
    assert c["steps"] == [3, 4]
    return r, [g for g in c["groups"] if g["bytes_delta"] or g["count_delta"]]


@pytest.mark.parametrize("scenario", ["cache_outputs", "cache_outputs_detached"])
def test_cached_outputs_are_one_output_per_step_held_by_the_module(scenario):
    r, grown = _grown(scenario)
    assert len(grown) == 1
    g = grown[0]
    assert (g["shape"], g["dtype"], g["device"]) == ([BATCH, WIDTH], "float32", "cpu")
    assert (g["count_delta"], g["bytes_delta"]) == (1, ONE_OUTPUT) == (1, r["growth_bytes_per_step"])
    assert {"kind": "module_attr", "name": "model.cache"} in g["holders"]


def test_a_kept_mse_loss_is_a_0_dim_tensor_holding_a_full_buffer():
    _, grown = _grown("append_loss_after_backward")
    assert len(grown) == 1
    g = grown[0]
    assert g["shape"] == [] and (g["count_delta"], g["bytes_delta"]) == (1, ONE_OUTPUT)
    assert g["holders"] == [{"kind": "list", "name": "losses"}]


def test_the_eval_loop_leak_is_the_graph_and_the_loss():
    r, grown = _grown("append_loss_no_backward")
    by_shape = {tuple(g["shape"]): g for g in grown}
    assert set(by_shape) == {(BATCH, WIDTH), ()}
    # Saved for backward per step: every layer's ReLU output (the last one is also mse_loss's input).
    assert by_shape[(BATCH, WIDTH)]["bytes_delta"] == LAYERS * ONE_OUTPUT
    assert {"kind": "graph", "name": "losses"} in by_shape[(BATCH, WIDTH)]["holders"]
    assert by_shape[()]["bytes_delta"] == ONE_OUTPUT
    assert sum(g["bytes_delta"] for g in grown) == r["growth_bytes_per_step"]


@pytest.mark.parametrize("scenario", ["fixed", "no_zero_grad"])
def test_nothing_grows_in_a_flat_loop(scenario):
    r, grown = _grown(scenario)
    assert grown == [] and r["census"]["growth_bytes"] == 0
    params = [g for g in r["census"]["groups"] if g["shape"] == [WIDTH, WIDTH]]
    assert params and any(h["kind"] == "parameter" for h in params[0]["holders"])


def test_holders_find_graph_saved_tensors_of_a_kept_output():
    tracker = MemoryTracker(listeners=[census.Census()])
    with tracker:
        lin = torch.nn.Linear(8, 8)
        x = torch.randn(2, 8)
        kept = [torch.relu(lin(x))]
    held = census.holders({"kept": kept})
    # relu saves its result: the kept tensor itself; addmm saves its input x
    assert {"kind": "graph", "name": "kept"} in held[x.untyped_storage()._cdata]
    assert {"kind": "list", "name": "kept"} in held[kept[0].untyped_storage()._cdata]
