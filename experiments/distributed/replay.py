"""One rank of an FSDP2 run replayed on fake tensors: FSDP2's own code (experiments/distributed/rank.py, the code
the live runs use) under FakeTensorMode with PyTorch's fake process group, which completes every collective
without sending anything. Like experiments/estimate/replay.py for one device, it allocates nothing and counts what the
real rank keeps: the sharded parameters, gradients and state, the all-gathered blocks, the unsharded gradients
before their reduce-scatter and those kept across the micro-batches of an accumulation. For CUDA the allocation
trace goes through the caching-allocator model (whole blocks) and the scratch memory measured per op.

Under CPU offload the same replay leaves out what the real rank keeps in host memory (the `Offload` listener).

What fake tensors cannot show is timing: on GPUs a buffer used by a collective on another stream is freed only
when that stream is done with it.
"""

from __future__ import annotations

import dataclasses
import threading

import torch
import torch.distributed as dist
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed.device_mesh import init_device_mesh
from torch.testing._internal.distributed.fake_pg import FakeStore

from ..core.vocabulary import phase_tag
from ..estimate.allocator_model import replay_trace
from ..estimate.replay import NeverSkippingScaler, own_model_replay, replay_tracker
from ..training import fp32_math
from ..training.models import spec_for
from .rank import RankReplay, local, measure_rank, rank_options

_LOCK = threading.Lock()  # one default process group per process: replays take turns


class Offload:
    """A listener of the replayed rank's tracker under CPU offload: what the real rank keeps in host memory is moved
    out of the device's count. The sharded parameters (from the wrap on), their gradients (FSDP2 copies each
    reduce-scattered shard to the host and frees the device copy) and the whole optimizer step, which runs on the
    host (the tracker's off-device phase). On this CPU replay those copies are no-ops, so a storage leaves the count
    at the moment the real one would leave the GPU."""

    def __init__(self):
        self.params: list = []

    def parameters(self, tracker, params, wrapped: bool) -> None:
        if wrapped:  # the sharded parameters, right after the wrap
            self.params = params
            for p in params:
                tracker.move_to_host(p)

    def before_op(self, tracker) -> None:
        for p in self.params:
            if p.grad is not None:
                tracker.move_to_host(p.grad)

    def after_op(self, tracker, func, args, kwargs, out) -> None:
        if func.__name__.startswith("all_gather_copy_in"):
            # The real rank first copies each host shard to the GPU (`.to(device)`); those copies are
            # alive until the copy-in has run.
            tracker.hold_scratch(sum(local(t).untyped_storage().nbytes() for t in args[0]))


def replay_rank(
    dcfg, block: int = 1, transients: dict[str, tuple[int, ...]] | None = None, listeners=(), rank: int = 0
) -> dict:
    """One rank of `dcfg` on fake tensors (rank 0, the one an uneven split loads most, unless asked):
    {"peak_bytes", "peak_phase", "categories", "phases", "allocator_peak_bytes", ...}. peak_bytes counts storages
    (rounded to `block`); allocator_peak_bytes the caching allocator's whole blocks. `listeners`: more listeners of
    the replay's tracker (what else to watch)."""
    dcfg = dataclasses.replace(
        dcfg, config=dcfg.config.replace(device="cpu", timing_steps=0, budget_mb=None, force=True), check_update=False
    )
    offload = dcfg.strategy == "fsdp2_offload"
    extra = [*listeners, *([Offload()] if offload else [])]
    tracker, log, scratch = replay_tracker(
        block,
        transients,
        **rank_options(listeners=extra),
        off_device_tags=(phase_tag("optimizer_step"),) if offload else (),
    )
    with fp32_math.LOCK, _LOCK:  # the fp32 modes' lock first (experiments/estimate/replay.py says why)
        if dist.is_initialized():
            raise RuntimeError("a process group is initialised here already: replay in a process of its own")
        dist.init_process_group("fake", rank=rank, world_size=dcfg.world_size, store=FakeStore())
        try:
            mesh = init_device_mesh("cpu", (dcfg.world_size,))
            with FakeTensorMode(allow_non_fake_inputs=True), own_model_replay(spec_for(dcfg.config)):
                result = measure_rank(
                    dcfg,
                    rank,
                    torch.device("cpu"),
                    replay=RankReplay(tracker=tracker, mesh=mesh, scaler=NeverSkippingScaler),
                )
        finally:
            dist.destroy_process_group()
    if result.get("oom") or result.get("peak_bytes") is None:
        raise RuntimeError(f"the replay did not finish: {result.get('oom')}")
    marks = replay_trace(log.events, warm_up=True)["marks"]  # each rank warms up as the engine does
    steps = [i for i, p in enumerate(result["phases"]) if p["step"] >= 1 and i < len(marks)]
    at = max(steps, key=lambda i: marks[i]["peak_allocated_bytes"])
    categories = {k: int(v) for k, v in (result.get("breakdown") or {}).items()}
    return {
        "peak_bytes": int(result["peak_bytes"]),
        "peak_phase": result["peak_phase"],
        "categories": categories,
        "phases": result["phases"],
        "signatures": sorted(set(scratch.signatures)),
        "allocator_peak_bytes": int(marks[at]["peak_allocated_bytes"]),
        "allocator_peak_phase": {"step": result["phases"][at]["step"], "phase": result["phases"][at]["phase"]},
    }
