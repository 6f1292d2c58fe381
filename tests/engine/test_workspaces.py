"""The kernels' scratch memory as the replay takes it: the allocations an op frees before it returns, in order, read
from an allocator trace (experiments/estimate/workspaces.py), and each allocated and freed in turn in the replay's
allocation log. The measurement itself runs on the GPU (tests/gpu/test_workspaces_gpu.py)."""

import json

import torch

from experiments.core.workspace_table import load, sizes
from experiments.estimate.allocator_model import replay_trace
from experiments.estimate.replay import replay_tracker
from experiments.estimate.workspaces import scratch_allocations, signature

MIB = 2**20


def alloc(addr, size):
    return {"action": "alloc", "addr": addr, "size": size}


def free(addr, size=0):
    return {"action": "free_requested", "addr": addr, "size": size}


def test_a_convolution_backward_keeps_both_workspaces_in_order_and_its_outputs_out():
    # As the H200 traced ResNet-50's backward: grad_input, a workspace, grad_weight, a larger workspace.
    events = [alloc(1, 196 * MIB), alloc(2, 294 * MIB), free(2), alloc(3, MIB // 2), alloc(2, 302 * MIB), free(2)]
    assert scratch_allocations(events) == (294 * MIB, 302 * MIB)


def test_scratch_alive_at_once_counts_as_one_allocation_of_their_peak_together():
    events = [alloc(1, 4 * MIB), alloc(2, 6 * MIB), free(1), alloc(3, MIB), free(2), free(3), alloc(4, 2 * MIB)]
    assert scratch_allocations(events) == (10 * MIB,)


def test_an_address_reused_for_an_output_is_not_scratch_and_empty_allocations_are_ignored():
    events = [alloc(7, 8 * MIB), free(7), alloc(7, 3 * MIB), alloc(8, 0), free(8)]
    assert scratch_allocations(events) == (8 * MIB,)
    assert scratch_allocations([]) == ()


def test_tables_of_one_number_per_op_still_load_as_one_allocation(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"a": 1024, "b": 0, "c": [512, 2048]}))
    assert load(path) == {"a": (1024,), "b": (), "c": (512, 2048)}
    assert sizes(3.0) == (3,) and sizes([]) == ()
    assert load(tmp_path / "missing.json") == {}


def test_the_replay_allocates_and_frees_each_scratch_allocation_in_turn():
    x, w = torch.zeros(2, 3, 8, 8), torch.zeros(4, 3, 3, 3)
    args = (x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    func = torch.ops.aten.convolution.default
    sig = signature(func, args)
    tracker, log, scratch = replay_tracker(512, {sig: (3 * MIB, 5 * MIB)})
    scratch.after_op(tracker, func, args, {}, None)
    held = [(kind, n) for kind, _key, n in log.events]
    assert held == [("alloc", 3 * MIB), ("free", 0), ("alloc", 5 * MIB), ("free", 0)]
    # Each in turn: a 3 MiB block, then a 5 MiB one that does not fit in it, in one 20 MiB segment.
    model = replay_trace(log.events)
    assert model["peak_allocated_bytes"] == 5 * MIB and model["reserved_bytes"] == 20 * MIB
    assert tracker.peak == tracker.current + 5 * MIB


def test_a_read_only_cache_folder_keeps_what_was_measured_for_this_process(tmp_path, monkeypatch):
    """docs/operators.md: a read-only home costs the measurement at each start. Saving the table failed with the
    measurement in hand, and the op stayed unmeasured (the caller gave up on it) every time."""
    import torch

    from experiments.estimate import workspaces

    blocked = tmp_path / "file"
    blocked.write_text("")  # a folder cannot be made under a file: mkdir fails as on a read-only home
    monkeypatch.setattr(workspaces, "measure", lambda sig, device: (4096,))
    got = workspaces.measure_all(["op-a"], torch.device("cpu"), blocked / "cache" / "table.json")
    assert got == {"op-a": (4096,)}
