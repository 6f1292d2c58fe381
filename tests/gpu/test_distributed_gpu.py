"""Data-parallel runs on 2 GPUs (NCCL): per-rank peaks against a plain PyTorch DDP / FSDP2 loop measured with
torch.cuda's own counters, the sharded update against one GPU, and the per-rank estimate. Skipped without 2 GPUs.

    python3 -m pytest tests/gpu/test_distributed_gpu.py -v -s
"""

from __future__ import annotations

import multiprocessing

import pytest
import torch

from tests.gpu.gpu_lock import one_gpu_user  # noqa: F401 - the fixture the marks use

pytestmark = [
    pytest.mark.usefixtures("one_gpu_user"),
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices"),
]

MIB = 2**20
LAYERS, WIDTH, BATCH = 8, 1024, 16
BASE = {
    "model": "mlp",
    "layers": LAYERS,
    "width": WIDTH,
    "batch": BATCH,
    "steps": 3,
    "timing_steps": 5,
    "device": "cuda",
    "world_size": 2,
}
STRATEGIES = ("ddp", "ddp_zero1", "fsdp2_zero2", "fsdp2_zero3", "fsdp2_offload")


@pytest.fixture(scope="module")
def runs():
    from experiments.distributed.launch import run_distributed_many

    plans = [dict(BASE, strategy=s) for s in STRATEGIES] + [
        dict(BASE, strategy="fsdp2_zero3", precision="amp_bf16"),
        dict(BASE, strategy="ddp", batch=512, checkpoint="segments"),
    ]
    # One launch per plan: ranks that ran another strategy before would carry its leftovers into the baseline.
    return [run_distributed_many([plan])[0] for plan in plans]


def _plain_rank(rank: int, port: int, out, only: str) -> None:
    """DDP and FSDP2 written out: peak of steps 2-3 above what was allocated before the model, per torch.cuda."""
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch import nn
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel

    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2, device_id=device)
    w = torch.randn(64, 64, device=device, requires_grad=True)
    (w @ w).sum().backward()  # the cuBLAS workspaces, before the baseline (as the engine does)
    for strategy in (only,):  # one strategy per process, as the engine runs them
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.manual_seed(0)
        model = nn.Sequential(*[nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU()) for _ in range(LAYERS)]).to(device)
        if strategy == "ddp":
            model = DistributedDataParallel(model, device_ids=[rank], bucket_cap_mb=25)
        else:
            for block in model:
                fully_shard(block)
            fully_shard(model)
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
        x, y = torch.randn(BATCH, WIDTH, device=device), torch.randn(BATCH, WIDTH, device=device)
        for step in range(3):
            if step == 1:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            opt.zero_grad(set_to_none=True)
            F.mse_loss(model(x), y).backward()
            opt.step()
        torch.cuda.synchronize()
        out.put((rank, strategy, torch.cuda.max_memory_allocated() - base))
        del model, opt, x, y
        torch.cuda.empty_cache()
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def plain():
    import torch.multiprocessing as mp

    from experiments.distributed.launch import _free_port

    got = {}
    for strategy in ("ddp", "fsdp2_zero3"):
        q = multiprocessing.get_context("spawn").Queue()
        mp.start_processes(_plain_rank, args=(_free_port(), q, strategy), nprocs=2, start_method="spawn")
        for _ in range(2):
            rank, strategy, peak = q.get(timeout=120)
            got[(rank, strategy)] = peak
    return got


def _steady_net_peak(rank: dict) -> int:
    return max(p["peak_bytes"] for p in rank["phases"] if p["step"] >= 2) - rank["baseline_bytes"]


@pytest.mark.parametrize(("index", "strategy"), [(0, "ddp"), (3, "fsdp2_zero3")])
def test_per_rank_peak_equals_a_plain_pytorch_loop(runs, plain, index, strategy):
    for rank in (0, 1):
        engine = _steady_net_peak(runs[index]["ranks"][rank])
        reference = plain[(rank, strategy)]
        print(f"{strategy} rank {rank}: engine {engine / MIB:.2f} MiB, plain loop {reference / MIB:.2f} MiB")
        # The engine's step keeps a detached copy of the loss, and its data was copied in before the step.
        # NCCL reads gradients on its own stream: a block freed on the compute stream is reused only after the
        # collective that read it has finished, so whether one more copy of the gradients (DDP) or of this rank's
        # gradient shard (FSDP2) is alive at the peak depends on timing. The same plain loop measured 193.3 and
        # 225.3 MiB on two runs on 2 H200s (32.0 MiB: the model's gradients).
        grads = LAYERS * (WIDTH * WIDTH + WIDTH) * 4 // (1 if strategy == "ddp" else 2)
        assert min(abs(engine - reference), abs(abs(engine - reference) - grads)) <= 2 * MIB, (
            strategy,
            rank,
            engine,
            reference,
        )


def test_every_strategy_gives_the_single_device_update(runs):
    for r in runs:
        assert not r["errors"], (r["strategy"], r["errors"])
        print(f"{r['strategy']} {r['config']['precision']}: update {r['update_check']}")
        assert r["update_check"]["ok"], (r["strategy"], r["update_check"])


def test_sharding_lowers_the_per_rank_peak_and_costs_time(runs):
    by = {r["strategy"]: r for r in runs[:5]}
    net = {s: max(_steady_net_peak(rank) for rank in r["ranks"]) for s, r in by.items()}
    print({s: f"{v / MIB:.1f} MiB, {by[s]['step_ms']['median']:.2f} ms" for s, v in net.items()})
    assert net["fsdp2_zero3"] < net["fsdp2_zero2"] < net["ddp"]
    assert net["ddp_zero1"] < net["ddp"]
    assert net["fsdp2_offload"] < net["fsdp2_zero3"]
    assert by["ddp"]["breakdown"]["communication"] > 0


def test_offload_keeps_host_memory_apart_from_the_device_peak(runs):
    """FSDP2 + CPU offload: the shards, their gradients and Adam's state are host memory, a series of their own; the
    device's categories hold none of them and add up to at most the device's net peak."""
    params = LAYERS * (WIDTH * WIDTH + WIDTH) * 4
    offload = runs[4]
    assert offload["strategy"] == "fsdp2_offload"
    for rank in offload["ranks"]:
        device, host = rank["breakdown"], rank["host_breakdown"]
        print(f"offload rank {rank['rank']}: device {device}, host {host}, host peak {rank['host_peak_bytes']}")
        assert device["parameters"] == device["optimizer_state"] == 0
        assert sum(v for k, v in device.items() if k != "other") <= rank["peak_bytes"] - rank["baseline_bytes"]
        assert host["parameters"] == params // 2 and host["optimizer_state"] >= params  # two moments of the shard
        assert rank["host_peak_bytes"] >= 2 * params
    for r in runs[:4]:  # the other strategies keep only Adam's step counters on the host
        assert all(rank["host_peak_bytes"] < MIB for rank in r["ranks"]), r["strategy"]


def test_estimate_accuracy_per_rank(runs):
    errors = []
    for r in runs:
        measured = max(_steady_net_peak(rank) for rank in r["ranks"])
        errors.append((r["estimate"]["peak_bytes"] - measured) / measured)
        print(
            f"{r['strategy']:14} {r['config']['precision']:8} batch {r['config']['batch']:4}: measured "
            f"{measured / MIB:.1f} MiB, estimate {r['estimate']['peak_bytes'] / MIB:.1f} MiB ({errors[-1] * 100:+.1f} %)"
        )
    print(f"mean |error| {sum(abs(e) for e in errors) / len(errors) * 100:.1f} %")
    assert max(abs(e) for e in errors) < 0.25
