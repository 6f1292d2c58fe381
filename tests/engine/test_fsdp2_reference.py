"""FSDP2's per-rank replay (experiments/distributed/replay.py) against PyTorch's own FSDP2 memory tracker,
`torch.distributed._tools.fsdp2_mem_tracker.FSDPMemTracker`, on the same sharded model, optimizer and batch, both
on fake tensors with a fake process group: the same peak, to the byte.

The reference loop is written out here (fully_shard per block and on the root, the optimizer's steps); only the
model, the optimizer's settings and the batch come from the engine, so that both count the same program. Its loss
is the CNN's cross-entropy: mse_loss's real CPU kernel keeps a full-size storage behind its 0-dim loss, which the
replay counts (experiments/estimate/replay.py fake_kernel_bytes) and a tracker of fake tensors cannot see.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.testing._internal.distributed.fake_pg import FakeStore

from experiments.core.config import DistributedConfig
from experiments.distributed.rank import rank_batch
from experiments.distributed.replay import replay_rank
from experiments.training.models import build_model, spec_for
from experiments.training.strategies import make_optimizer

# Configurations whose ZeRO-2 and ZeRO-3 peaks differ (a reference that cannot tell them apart would prove little).
PAIR = {"world_size": 2, "layers": 4, "width": 32, "image_size": 8, "batch": 2, "optimizer": "sgd"}
CASES = [
    dict(PAIR, strategy="fsdp2_zero3"),
    dict(PAIR, strategy="fsdp2_zero2"),
    {
        "strategy": "fsdp2_zero3",
        "world_size": 3,
        "layers": 4,
        "width": 24,
        "image_size": 8,
        "batch": 3,
        "optimizer": "sgd",
        "precision": "bf16",
    },
    {
        "strategy": "fsdp2_zero2",
        "world_size": 4,
        "layers": 4,
        "width": 8,
        "image_size": 16,
        "batch": 4,
        "optimizer": "adamw",
        "precision": "bf16",
    },
]


def _reference_peak(dcfg: DistributedConfig) -> int:
    cfg = dcfg.rank_config
    inputs, targets = rank_batch(dcfg, 0)
    dist.init_process_group("fake", rank=0, world_size=dcfg.world_size, store=FakeStore())
    try:
        mesh = init_device_mesh("cpu", (dcfg.world_size,))
        with FakeTensorMode(allow_non_fake_inputs=True):
            torch.manual_seed(cfg.seed)
            model = build_model(cfg, torch.device("cpu"))
            reshard = dcfg.strategy != "fsdp2_zero2"
            for block in spec_for(cfg).blocks(model):
                fully_shard(block, mesh=mesh, reshard_after_forward=reshard)
            fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
            optimizer = make_optimizer(cfg, model.parameters())
            x, y = inputs["x"].clone(), targets["y"].clone()
            tracker = FSDPMemTracker(model, optimizer)
            tracker.track_inputs((x, y))
            with tracker:
                for _ in range(cfg.steps):
                    optimizer.zero_grad(set_to_none=True)
                    loss = F.cross_entropy(model(x), y)
                    loss.backward()
                    loss = loss.detach().clone()  # as the engine's step keeps its loss (one element)
                    optimizer.step()
                    del loss
                    tracker.reset_mod_stats()
            (peak,) = tracker.get_tracker_snapshot("peak").values()
    finally:
        dist.destroy_process_group()
    return peak["Total"]


def _config(case: dict) -> DistributedConfig:
    return DistributedConfig.from_dict(
        {"model": "cnn", "steps": 2, "timing_steps": 0, "device": "cpu", "check_update": False, **case}
    )


@pytest.fixture(scope="module")
def references() -> dict[str, int]:
    """PyTorch's tracker in a fresh process: its module hooks are process-wide, and a test that ran before in this
    process can leave the module hierarchy it tracks inconsistent ("The Module hierarchy tracking is wrong")."""
    spawn = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=spawn) as pool:
        peaks = list(pool.map(_reference_peak, [_config(case) for case in CASES]))
    return {str(case): peak for case, peak in zip(CASES, peaks, strict=True)}


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['strategy']}-{c['world_size']}")
def test_fsdp2_replay_is_pytorchs_fsdp_mem_tracker(case, references):
    replayed = replay_rank(_config(case))
    assert replayed["peak_bytes"] == references[str(case)], (case, replayed["peak_phase"])


def test_the_reference_tells_zero2_from_zero3(references):
    """ZeRO-3 reshards after the forward: its peak is lower, in the reference as in the replay."""
    zero3, zero2 = (references[str(case)] for case in CASES[:2])
    assert zero3 < zero2
