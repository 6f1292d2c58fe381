"""What the sandbox's strategies send, counted at the c10d ops of two gloo ranks, against the traffic model the
estimate uses; and a distributed job started from a daemonic process, as the classroom worker starts it."""

from __future__ import annotations

import pytest
import torch

from experiments.core.config import DistributedConfig
from experiments.jobs.kinds import execute
from tests.engine.distributed_checks import BASE, CPU_STRATEGIES


def _daemonic_job(q) -> None:
    r = execute(
        "distributed",
        dict(BASE, layers=2, width=64, batch=8, timing_steps=0, strategy="fsdp2_zero3"),
        progress=lambda *a: None,
    )
    q.put((r["errors"], r["update_check"]["ok"], len(r["ranks"])))


def test_runs_from_a_daemonic_process_like_the_classroom_worker():
    """The worker is a daemonic process, which multiprocessing forbids to have children: the ranks are then
    started from a child interpreter instead."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_daemonic_job, args=(q,), daemon=True)
    p.start()
    assert q.get(timeout=120) == ([], True, 2)
    p.join()


# --- traffic: what the sandbox's strategies send, counted at the c10d ops, against the model the estimate uses


class _Payload(torch.utils._python_dispatch.TorchDispatchMode):
    """One rank's ring traffic in bytes, before the ring's (N - 1)/N: an all-reduce moves its payload twice (a
    reduce-scatter and an all-gather), a broadcast, an all-gather's output and a reduce-scatter's input once."""

    WHICH = {"allreduce_": (0, 2), "broadcast_": (0, 1), "_allgather_base_": (0, 1), "_reduce_scatter_base_": (1, 1)}

    def __init__(self):
        super().__init__()
        self.bytes = 0
        self.unknown: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "c10d":
            name = func.__name__.split(".")[0]
            if name in self.WHICH:
                index, times = self.WHICH[name]
                tensors = torch.utils._pytree.tree_flatten(args[index])[0]
                self.bytes += times * sum(t.numel() * t.element_size() for t in tensors)
            elif name != "barrier":
                self.unknown.add(name)
        return func(*args, **(kwargs or {}))


def _traffic_rank(rank: int, port: int, out, plans: list[dict]) -> None:
    """The sandbox's own wrap, optimizer and step; the second step's collectives are counted."""
    import torch.distributed as dist

    from experiments.distributed.rank import rank_batch, rank_setup, sync_phase, sync_setter
    from experiments.training.step import build_state, train_step

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    cpu = torch.device("cpu")
    for plan in plans:
        dcfg = DistributedConfig.from_dict(plan)
        cfg = dcfg.rank_config
        inputs, targets = rank_batch(dcfg, rank)
        state = build_state(cfg, cpu, rank_setup(dcfg, cpu, inputs, targets))
        phase = sync_phase(sync_setter(state.model, dcfg.strategy), cfg.accum)
        train_step(state, 0, phase)  # step 1 creates the optimizer state
        counted = _Payload()
        with counted:
            train_step(state, 0, phase)
        out.put((rank, dcfg.strategy, cfg.accum, counted.bytes, sorted(counted.unknown)))
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def traffic():
    import multiprocessing

    import torch.multiprocessing as mp

    from experiments.distributed.launch import _free_port

    small = dict(BASE, layers=3, width=64, batch=8, steps=2, timing_steps=0)
    plans = [dict(small, strategy=s, accum=a) for s in CPU_STRATEGIES for a in (1, 2)]
    q = multiprocessing.get_context("spawn").Queue()
    mp.start_processes(_traffic_rank, args=(_free_port(), q, plans), nprocs=2, start_method="spawn")
    got = {}
    for _ in range(2 * len(plans)):
        rank, strategy, accum, nbytes, unknown = q.get(timeout=120)
        assert not unknown, (strategy, unknown)
        got[(rank, strategy, accum)] = nbytes
    return got, 3 * (64 * 64 + 64) * 4


def test_traffic_model_is_what_each_strategy_sends(traffic):
    """ZeRO-1 as torch runs it (DDP + ZeroRedundancyOptimizer) all-reduces every gradient and then broadcasts every
    updated parameter: 3Ψ, half as much again as DDP, where the ZeRO paper's stage 1 moves 2Ψ. FSDP2 gathers per
    micro-batch and reduces once; DDP and ZeRO-1 communicate once per step whatever the accumulation."""
    from experiments.distributed.estimate import traffic_units

    got, params = traffic
    for (rank, strategy, accum), nbytes in got.items():
        # DDP also broadcasts a few bytes of its own state each forward.
        assert nbytes / params == pytest.approx(traffic_units(strategy, accum), abs=0.01), (rank, strategy, accum)
    assert traffic_units("ddp_zero1") == 1.5 * traffic_units("ddp")
