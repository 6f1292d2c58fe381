"""The per-rank estimate against live gloo ranks on seeded grids of configurations: DDP and ZeRO-1 to the byte,
FSDP2 within a late buffer of its replay, at two, three and four ranks."""

from __future__ import annotations

import random

import pytest

from experiments.distributed.launch import run_distributed_many
from tests.engine.distributed_checks import CPU_STRATEGIES, check_against_replay, estimate_holds, replayed


def test_ddp_and_zero1_estimates_are_exact_on_a_seeded_grid():
    """Seeded configurations of every model, precision, checkpointing, accumulation and optimizer: the estimate
    is the most loaded rank's peak to the byte (ZeRO-1's ranks differ when its partition is uneven)."""
    rng = random.Random(41)
    plans = []
    for _ in range(4):
        model = rng.choice(("mlp", "transformer"))
        plan = {
            "model": model,
            "layers": rng.randint(1, 5),
            "precision": rng.choice(("fp32", "bf16", "amp_bf16")),
            "checkpoint": rng.choice(("none", "per_layer")),
            "accum": rng.choice((1, 2)),
            "optimizer": rng.choice(("adam", "adamw", "sgd_momentum")),
            "steps": 3,
            "timing_steps": 0,
            "device": "cpu",
            "world_size": 2,
            "check_update": False,
        }
        if model == "mlp":
            plan.update(width=rng.choice((64, 96, 192)), batch=rng.choice((8, 16, 64)))
        else:
            plan.update(width=32, heads=4, seq_len=32, batch=4)
        plans += [dict(plan, strategy="ddp"), dict(plan, strategy="ddp_zero1")]
    for plan, r in zip(plans, run_distributed_many(plans), strict=True):
        assert not r["errors"], r["errors"]
        estimate_holds(plan, r)


def test_estimate_on_a_seeded_random_grid(grid_seed):
    """Random configurations and strategies: the per-rank estimate against every rank, as above. Two of the grid's
    configurations per run, drawn from the day's seed (tests/conftest.py), so the days cover the grid."""
    rng = random.Random(f"{grid_seed}-two-ranks")
    plans = []
    for _ in range(2):
        plans.append(
            {
                "model": "mlp",
                "layers": rng.choice([2, 3, 6]),
                "width": rng.choice([64, 128, 192]),
                "batch": rng.choice([8, 32, 128]),
                "precision": rng.choice(["fp32", "bf16"]),
                "checkpoint": rng.choice(["none", "segments"]),
                "optimizer": rng.choice(["adam", "sgd_momentum"]),
                "strategy": rng.choice(CPU_STRATEGIES),
                "steps": 2,
                "timing_steps": 0,
                "device": "cpu",
                "world_size": 2,
                "check_update": False,
            }
        )
    for plan, r in zip(plans, run_distributed_many(plans), strict=True):
        assert not r["errors"], (grid_seed, plan, r["errors"])
        estimate_holds(plan, r)


@pytest.mark.parametrize("ws", [3, 4])
def test_fsdp2_replay_matches_the_gloo_ranks_at_three_and_four_ranks(ws, grid_seed):
    """FSDP2 replayed on fake tensors with a fake process group (experiments/distributed/replay.py) against the real
    ranks, on random configurations at three and four ranks, ZeRO-2 and ZeRO-3, MLPs and transformers, fp32 and
    bf16, accumulation and checkpointing (two ranks: the tests above), phase by phase as above, each rank against its
    own replay (a dimension that does not split evenly leaves the last ranks smaller shards). Every rank is replayed,
    which is what takes the time: one configuration per world size and run, drawn from the day's seed
    (tests/conftest.py), so the days cover the grid."""
    from experiments.distributed.launch import run_distributed

    rng = random.Random(f"{grid_seed}-{ws}-ranks")
    plan = {
        "model": rng.choice(("mlp", "transformer")),
        "layers": rng.choice((2, 3)),
        "precision": rng.choice(("fp32", "bf16")),
        "checkpoint": rng.choice(("none", "per_layer")),
        "optimizer": rng.choice(("adam", "sgd_momentum")),
        "accum": rng.choice((1, 2)),
        "strategy": rng.choice(("fsdp2_zero2", "fsdp2_zero3")),
        "steps": 2,
        "timing_steps": 0,
        "device": "cpu",
        "world_size": ws,
        "check_update": False,
    }
    if plan["model"] == "mlp":
        plan.update(width=rng.choice((64, 96, 160)), batch=rng.choice((8, 16, 32)))
    else:
        plan.update(width=64, heads=4, seq_len=32, batch=4)
    r = run_distributed(plan)
    assert not r["errors"], (grid_seed, plan, r["errors"])
    assert r["estimate"]["method"].startswith("FSDP2 replayed")
    for rank in r["ranks"]:
        check_against_replay(plan, rank, replayed(plan, rank["rank"]))
