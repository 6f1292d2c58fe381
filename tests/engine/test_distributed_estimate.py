"""The data-parallel estimate without live ranks: offload, fp16 under FSDP2, ZeRO-1's temporaries, what fits against a
full scan, the traffic model, and bad input. (The live gloo ranks: tests/engine/test_distributed.py.)"""

from __future__ import annotations

import random

import pytest
import torch

from experiments.core.config import ConfigError, DistributedConfig
from experiments.distributed.estimate import estimate_sharded, what_fits, zero1_partition
from experiments.distributed.launch import device_type_for
from experiments.jobs.kinds import execute
from tests.engine.distributed_checks import (
    BASE,
    CPU_STRATEGIES,
    DATA,
    LAYERS,
    P,
)


def test_offload_estimate_keeps_nothing_of_the_host_on_the_device():
    """FSDP2 with CPU offload, replayed: the shards, their gradients and Adam's state are in host memory, so the
    device holds none of them, and its peak is ZeRO-3's without at least the shards and the state."""
    offload = estimate_sharded(DistributedConfig.from_dict(dict(BASE, strategy="fsdp2_offload")), "cuda")
    zero3 = estimate_sharded(DistributedConfig.from_dict(dict(BASE, strategy="fsdp2_zero3")), "cuda")
    cats = offload["categories"]
    assert cats["parameters"] == cats["gradients"] == cats["optimizer_state"] == 0
    assert cats["communication"] > 0 and cats["activations"] > 0 and cats["data"] == DATA
    assert offload["peak_bytes"] <= zero3["peak_bytes"] - P // 2 - P  # the shards (P/2) and Adam's state (2P/2)
    # What it moved to the host is counted there: the shards, their gradients and Adam's state (and step counters).
    counters = 4 * 2 * LAYERS  # one per tensor: a weight and a bias per layer
    assert offload["host_categories"] == {"parameters": P // 2, "gradients": P // 2, "optimizer_state": P + counters}
    assert "host_categories" not in zero3


@pytest.mark.parametrize("strategy", ["fsdp2_zero2", "fsdp2_zero3", "fsdp2_offload"])
def test_fsdp2_replay_runs_under_fp16_with_its_grad_scaler(strategy):
    """GradScaler decides a skip from a value (`.item()`), which fake tensors do not have: the replay keeps the
    scaler's allocations without the decision. fp16 and bf16 tensors are the same size, so the only difference
    is the scaler's own scale, found-inf and growth tensors (a 512-byte block each on CUDA)."""
    peaks = [
        estimate_sharded(DistributedConfig.from_dict(dict(BASE, strategy=strategy, precision=p)), "cuda")
        for p in ("amp_bf16", "amp_fp16")
    ]
    assert 0 < peaks[1]["peak_bytes"] - peaks[0]["peak_bytes"] <= 3 * 512


def test_zero1_step_temporaries_follow_its_parameter_order():
    """ZeroRedundancyOptimizer steps its share largest first; Adam's for-loop makes sqrt(v) and the denominator
    of one tensor while the last tensor's denominator is still alive: 3 W for two W-sized tensors in a row."""
    from experiments.core.config import ExperimentConfig
    from experiments.distributed.estimate import optimizer_step_bytes

    w, b = (256, 256), (256,)
    W, B = 256 * 256 * 4, 256 * 4
    adam = {"model": "mlp", "optimizer": "adam", "device": "cpu"}
    loop = ExperimentConfig.from_dict(dict(adam, optimizer_impl="for-loop"))
    assert optimizer_step_bytes(loop, [w, w], 4) == (4 * W + 2 * 4, 3 * W)  # two moments each, two step counters
    assert optimizer_step_bytes(loop, [w, b, w, b], 4) == (4 * W + 4 * B + 4 * 4, 2 * W + B)
    foreach = ExperimentConfig.from_dict(dict(adam, optimizer_impl="foreach"))
    assert optimizer_step_bytes(foreach, [w, b, w, b], 4)[1] == 2 * W + 2 * B  # sqrt(v) of every tensor at once
    momentum = ExperimentConfig.from_dict({"model": "mlp", "optimizer": "sgd_momentum", "device": "cpu"})
    assert optimizer_step_bytes(momentum, [w, b], 4) == (W + B, 0)


def test_zero_paper_terms_and_what_fits():
    dcfg = DistributedConfig.from_dict(dict(BASE, strategy="fsdp2_zero3"))
    est = estimate_sharded(dcfg)
    assert est["zero_paper"]["ddp"] == 16 * (P // 4)
    assert zero1_partition([(4, 4), (4,), (4, 4), (4,)], 2) == [[0, 1], [2, 3]]
    ddp = estimate_sharded(DistributedConfig.from_dict(dict(BASE, strategy="ddp")))["peak_bytes"]
    fit = what_fits(
        {k: v for k, v in BASE.items() if k != "world_size"}, capacity_bytes=int(ddp * 0.8), device_type="cpu"
    )
    assert fit["world_size"] == 2 and fit["strategy"] != "ddp" and fit["peak_bytes"] <= ddp * 0.8


def test_what_fits_finds_what_a_full_scan_finds():
    """The bisection over world sizes against trying every world size and strategy in order, on seeded
    configurations and budgets between one device's peak and a sixth of it, both batch modes."""
    from experiments.core.config import ExperimentConfig
    from experiments.distributed.estimate import STRATEGY_ORDER
    from experiments.estimate.estimator import estimate

    rng = random.Random(43)
    for _ in range(3):
        config = {
            "model": "mlp",
            "layers": rng.randint(2, 6),
            "width": rng.choice((64, 128, 256)),
            "batch": rng.choice((24, 48, 96)),
            "optimizer": rng.choice(("adam", "sgd_momentum")),
            "precision": rng.choice(("fp32", "bf16")),
            "steps": 2,
            "device": "cpu",
        }
        single = estimate(ExperimentConfig.from_dict(config), device_type="cpu")["peak_bytes"]
        mode = rng.choice(("per_rank", "global"))
        capacity = int(single * rng.uniform(0.17, 0.95))
        scan = None
        for n in range(2, 9):
            for strategy in (s for s in STRATEGY_ORDER if s != "fsdp2_offload"):
                try:
                    dcfg = DistributedConfig.from_dict(
                        {**config, "strategy": strategy, "world_size": n, "batch_mode": mode}
                    )
                except ConfigError:
                    continue
                if estimate_sharded(dcfg)["peak_bytes"] <= capacity:
                    scan = (n, strategy)
                    break
            if scan:
                break
        fit = what_fits(config, capacity, device_type="cpu", batch_mode=mode)
        assert (fit and (fit["world_size"], fit["strategy"])) == (scan or None), (config, mode, capacity, fit, scan)
        if fit:
            assert fit["peak_bytes"] <= capacity


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"strategy": "zero4"}, "strategy"),
        ({"world_size": 0}, "world_size"),
        ({"world_size": 99}, "world_size"),
        ({"world_size": "two"}, "world_size"),
        ({"batch_mode": "half"}, "batch_mode"),
        ({"batch_mode": "global", "batch": 63}, "batch"),
        ({"batch": 6, "accum": 4}, "batch"),
        ({"layers": 0}, "layers"),
        ({"strategy": "fsdp2_zero3", "optimizer": "sgd_momentum", "optimizer_impl": "fused"}, "optimizer_impl"),
    ],
)
def test_bad_input_names_the_field(params, field):
    with pytest.raises(ConfigError) as err:
        DistributedConfig.from_dict({**BASE, **params})
    assert err.value.field == field


def test_offload_is_refused_on_cpu_and_world_size_beyond_gpus():
    with pytest.raises(ConfigError) as err:
        device_type_for(DistributedConfig.from_dict(dict(BASE, strategy="fsdp2_offload")))
    assert err.value.field == "strategy" and "not available on a CPU run" in str(err.value)
    with pytest.raises(ConfigError) as err:
        execute("distributed", dict(BASE, strategy="fsdp2_offload"))
    assert err.value.field == "strategy"
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError) as err:
            device_type_for(DistributedConfig.from_dict(dict(BASE, device="cuda")))
        assert err.value.field == "device"


def test_global_batch_mode_splits_the_batch():
    d = DistributedConfig.from_dict(dict(BASE, batch=64, batch_mode="global"))
    assert (d.per_rank_batch, d.global_batch, d.rank_config.batch) == (32, 64, 32)
    d = DistributedConfig.from_dict(dict(BASE, batch=64))
    assert (d.per_rank_batch, d.global_batch) == (64, 128)


def test_estimate_and_what_fits_use_the_traffic_model():
    from experiments.distributed.estimate import strategy_order, traffic_bytes

    est = {
        s: estimate_sharded(DistributedConfig.from_dict(dict(BASE, strategy=s)))["communication"]["per_step_bytes"]
        for s in CPU_STRATEGIES
    }
    assert est["ddp"] == traffic_bytes("ddp", P, 2) == P  # 2Ψ · (N - 1)/N at two ranks
    assert est["ddp_zero1"] == est["fsdp2_zero3"] == 1.5 * est["ddp"]
    assert est["fsdp2_zero2"] == est["ddp"]
    # Least traffic first, offload last: with accumulation ZeRO-2 gathers in every micro-batch and falls behind.
    assert strategy_order() == ("ddp", "fsdp2_zero2", "ddp_zero1", "fsdp2_zero3", "fsdp2_offload")
    assert strategy_order(accum=4) == ("ddp", "ddp_zero1", "fsdp2_zero2", "fsdp2_zero3", "fsdp2_offload")


def test_zero_stages_in_this_runs_bytes_beside_the_papers():
    """The paper counts mixed-precision Adam (2 + 2 + 12 bytes per parameter); the sandbox trains fp32 Adam
    (4 + 4 + 8), SGD with momentum keeps one state tensor, pure bf16 halves everything."""
    from experiments.core.config import ExperimentConfig
    from experiments.distributed.estimate import zero_paper_bytes, zero_run_bytes

    psi, n = 1000, 4
    assert zero_paper_bytes(psi, n) == {"ddp": 16000, "zero1": 4000 + 3000, "zero2": 2000 + 3500, "zero3": 4000}
    fp32 = zero_run_bytes(ExperimentConfig.from_dict({"optimizer": "adam"}), psi, n)
    assert fp32 == {"ddp": 16000, "zero1": 8000 + 2000, "zero2": 4000 + 3000, "zero3": 4000}
    momentum = zero_run_bytes(ExperimentConfig.from_dict({"optimizer": "sgd_momentum", "precision": "bf16"}), psi, n)
    assert momentum == {"ddp": 6000, "zero1": 4000 + 500, "zero2": 2000 + 1000, "zero3": 1500}
    est = estimate_sharded(DistributedConfig.from_dict(dict(BASE, strategy="ddp_zero1")))
    assert est["zero_this_run"]["zero1"] == (8 + 8 / 2) * (P // 4)


def test_a_gpu_ranks_tracker_counts_host_memory_apart():
    """CPU offload keeps shards, their gradients and Adam's state in host memory: on a rank whose device is not the
    CPU (the meta device stands in for a GPU here) those storages are a series of their own, never in the device's
    count, its peak or its categories."""
    from experiments.distributed.rank import rank_options
    from experiments.measure.tracker import MemoryTracker

    # The meta device holds no memory, and a tracker counts none for it unless told to (a GPU's stand-in here).
    tracker = MemoryTracker(**rank_options(torch.device("meta")), untracked_devices=())
    with tracker:
        tracker.begin_phase("_forward")
        on_device = torch.empty(1000, device="meta")
        state = torch.zeros(500)
        tracker.retag([state], "optimizer_state")
        tracker.reset_peak()
        step_temp = state * 2
        del step_temp
    assert (tracker.current, tracker.peak) == (4000, 4000)
    assert tracker.by_category()["temporaries"] == 4000 and tracker.by_category()["optimizer_state"] == 0
    assert (tracker.host_current, tracker.host_peak) == (2000, 4000)
    host = tracker.host_peak_by_category()
    assert (host["optimizer_state"], host["temporaries"]) == (2000, 2000)
    del state
    assert tracker.host_current == 0 and tracker.current == 4000
    del on_device
    together = MemoryTracker(
        **rank_options(torch.device("cpu"))
    )  # a CPU rank (gloo): its host memory is its device memory
    with together:
        kept = torch.zeros(500)
    assert together.current == 2000 and not together.host_apart
    del kept
