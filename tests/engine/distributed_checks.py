"""What the data-parallel tests share: the configuration they measure, its hand counts, and the checks of a live
gloo rank against the replay of FSDP2 on fake tensors and of a measured peak against the estimate."""

from __future__ import annotations

import functools
import json

import torch

from experiments.core.config import DistributedConfig
from experiments.training.models import spec_for

LAYERS, WIDTH, BATCH = 4, 256, 64
BASE = {
    "model": "mlp",
    "layers": LAYERS,
    "width": WIDTH,
    "batch": BATCH,
    "steps": 3,
    "timing_steps": 2,
    "device": "cpu",
    "world_size": 2,
}
CPU_STRATEGIES = ("ddp", "ddp_zero1", "fsdp2_zero2", "fsdp2_zero3")
P = LAYERS * (WIDTH * WIDTH + WIDTH) * 4  # fp32 parameters of the MLP
DATA = 2 * BATCH * WIDTH * 4  # inputs and targets of one rank

BLOCK = P // LAYERS  # one block's parameters (or gradients), fp32
STEP_COUNTERS = 2 * LAYERS * 4  # Adam's 0-dim fp32 step per parameter tensor (weights and biases)


def steady_peak(rank_result: dict) -> int:
    return max(p["peak_bytes"] for p in rank_result["phases"] if p["step"] >= 2)


def mesh_bytes(plan: dict) -> int:
    """What a live FSDP2 rank holds that its replay does not: fully_shard without a mesh makes one per call that has
    parameters of its own to shard, every block and the root when the model has parameters outside its blocks (a
    transformer's final LayerNorm; an MLP's head is an Identity), and each keeps its ranks as int32 (the replay
    shards every block on one mesh, made before it counts)."""
    cfg = DistributedConfig.from_dict(plan).rank_config
    spec = spec_for(cfg)
    model = spec.build(cfg, torch.device("meta"))
    blocks = spec.blocks(model)
    in_blocks = {id(p) for block in blocks for p in block.parameters()}
    groups = len(blocks) + any(id(p) not in in_blocks for p in model.parameters())
    return groups * plan["world_size"] * 4


def late_set(value: int, buffers: set[int]) -> set[int]:
    """`value`, or `value` and one of `buffers` still alive: gloo completes a collective on its own thread and drops
    the work's tensors there, so on a loaded machine one all-gather output or reduce-scatter input can still be
    alive at a moment when, on an idle one (and in the replay's fake process group), it is gone."""
    return {value} | {value + b for b in buffers}


class _Communication:
    """A listener of the replay's tracker: the sizes of the buffers that exist only to communicate."""

    def __init__(self):
        self.sizes: set[int] = set()

    def freed(self, tracker, key, rec):
        if rec.tag == "communication" and rec.nbytes:
            self.sizes.add(rec.nbytes)


def replayed(plan: dict, rank: int = 0) -> tuple[dict, set[int]]:
    """A rank's replay and its communication buffers' sizes; made once per configuration and rank in a test process
    (a replay takes seconds and several checks read the same one; nothing reads it to change it)."""
    return _replayed_json(json.dumps(plan, sort_keys=True), rank)


@functools.cache
def _replayed_json(plan_json: str, rank: int) -> tuple[dict, set[int]]:
    from experiments.distributed.replay import replay_rank

    comm = _Communication()
    return replay_rank(DistributedConfig.from_dict(json.loads(plan_json)), listeners=[comm], rank=rank), comm.sizes


def late_by(live: int, replayed: int, extra: int, buffers: set[int]) -> bool:
    """A live peak within what the replay allows: its own figure and `extra`, at most one buffer later."""
    return replayed + extra <= live <= replayed + extra + max(buffers, default=0)


def check_against_replay(plan: dict, rank: dict, replay: tuple[dict, set[int]]) -> None:
    """Every phase of a live FSDP2 rank from step 1 on against the deterministic replay: what is allocated at the
    phase's end is the replay's, or one communication buffer later; its peak lies between the two."""
    replayed, buffers = replay
    extra = mesh_bytes(plan)
    assert buffers and [(p["step"], p["phase"]) for p in rank["phases"]] == [
        (p["step"], p["phase"]) for p in replayed["phases"]
    ]
    for live, rep in zip(rank["phases"], replayed["phases"], strict=True):
        if live["step"] == 0:
            continue
        where = (plan["strategy"], rank["rank"], live["step"], live["phase"], live["micro"])
        assert live["allocated_bytes"] - extra in late_set(rep["allocated_bytes"], buffers), (where, live, rep)
        assert late_by(live["peak_bytes"], rep["peak_bytes"], extra, buffers), (where, live, rep)


def estimate_holds(plan: dict, result: dict) -> None:
    """DDP's rank is the single device's step plus the buckets, ZeRO-1's with its share of the state: the estimate is
    the most loaded rank's peak to the byte. FSDP2's estimate is its replay, which every live rank reaches and passes
    by at most one late communication buffer (and the meshes the live ranks make)."""
    measured = [rank["peak_bytes"] - rank["baseline_bytes"] for rank in result["ranks"]]
    est = result["estimate"]["peak_bytes"]
    if plan["strategy"].startswith("ddp"):
        assert est == max(measured), (plan, est, measured)
        return
    replay, buffers = replayed(plan)
    assert est == replay["peak_bytes"], (plan, est, replay["peak_bytes"])
    assert all(late_by(m, est, mesh_bytes(plan), buffers) for m in measured), (plan, est, measured, buffers)
