"""One rank of an FSDP2 run replayed on fake tensors: FSDP2's own code (experiments/distributed_rank.py, the code
the live runs use) under FakeTensorMode with PyTorch's fake process group, which completes every collective
without sending anything. Like experiments/replay.py for one device, it allocates nothing and counts what the
real rank keeps: the sharded parameters, gradients and state, the all-gathered blocks, the unsharded gradients
before their reduce-scatter and those kept across the micro-batches of an accumulation. For CUDA the allocation
trace goes through the caching-allocator model (whole blocks) and the scratch memory measured per op.

Under CPU offload the same replay leaves out what the real rank keeps in host memory (HostTracker).

What fake tensors cannot show is timing: on GPUs a buffer used by a collective on another stream is freed only
when that stream is done with it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading

_LOCK = threading.Lock()  # one default process group per process: replays take turns


def _classes():
    from .distributed_rank import RankRecorder, ShardTracker, local
    from .replay import _ReplayTracker

    class Tracker(ShardTracker, _ReplayTracker):
        """The rank's tracker that also writes the allocation trace (FSDP2's in-place resizes included)."""

        def __init__(self, block: int, transients: dict | None):
            _ReplayTracker.__init__(self, block=block, transients=transients)
            self.watch = {}

        def resync(self) -> None:
            before = {k: self.live[k].nbytes for k in self.watch if k in self.live}
            super().resync()
            for key, old in before.items():
                new = self.live[key].nbytes if key in self.live else 0
                if new != old:
                    self.events += ([("free", key, 0)] if old else []) + ([("alloc", key, new)] if new else [])

    class HostTracker(Tracker):
        """Under CPU offload: what the real rank keeps in host memory is not counted. The sharded parameters
        (from the wrap on), their gradients (FSDP2 copies each reduce-scattered shard to the host and frees the
        device copy) and the whole optimizer step, which runs on the host. On this CPU replay those copies are
        no-ops, so a storage leaves the count at the moment the real one would leave the GPU."""

        def __init__(self, block: int, transients: dict | None):
            super().__init__(block, transients)
            self.host: set[int] = set()
            self.params: list = []

        def track(self, t, tag, nbytes=None):
            if self.tag == "_optimizer_step" or local(t).untyped_storage()._cdata in self.host:
                return
            super().track(t, tag, nbytes)

        def _hold_scratch(self, nbytes: int) -> None:
            if self.tag != "_optimizer_step":
                super()._hold_scratch(nbytes)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if self.tag == "_optimizer_step":
                return func(*args, **(kwargs or {}))
            out = super().__torch_dispatch__(func, types, args, kwargs)
            if func.__name__.startswith("all_gather_copy_in"):
                # The real rank first copies each host shard to the GPU (`.to(device)`); those copies are
                # alive until the copy-in has run.
                self._hold_scratch(sum(local(t).untyped_storage().nbytes() for t in args[0]))
            return out

        def retag(self, tensors, tag):
            tensors = list(tensors)
            super().retag(tensors, tag)
            if tag == "parameters":  # the sharded parameters, right after the wrap
                self.params = tensors
                self.to_host(tensors)

        def resync(self) -> None:
            super().resync()
            self.to_host([p.grad for p in self.params if p.grad is not None])

        def to_host(self, tensors) -> None:
            for t in tensors:
                key = local(t).untyped_storage()._cdata
                if key in self.live:
                    self.events.append(("free", key, 0))
                    self.current -= self.live.pop(key).nbytes
                    self.watch.pop(key, None)
                    self.host.add(key)

        def _free(self, key: int) -> None:
            self.host.discard(key)
            super()._free(key)

    class Recorder(RankRecorder):
        @contextlib.contextmanager
        def __call__(self, name: str, step: int, micro: int | None = None):
            with super().__call__(name, step, micro):
                yield
            self.tracker.events.append(("mark", len(self.phases), 0))

    return Tracker, HostTracker, Recorder


def replay_rank(dcfg, block: int = 1, transients: dict[str, int] | None = None) -> dict:
    """Rank 0 of `dcfg` on fake tensors: {"peak_bytes", "peak_phase", "categories", "allocator_peak_bytes"}.
    peak_bytes counts storages (rounded to `block`); allocator_peak_bytes the caching allocator's whole blocks."""
    import torch
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from . import fp32_math
    from .allocator_model import replay_trace
    from .distributed_rank import measure_rank
    from .replay import _NeverSkippingScaler

    dcfg = dataclasses.replace(dcfg, config=dcfg.config.replace(device="cpu", timing_steps=0, budget_mb=None,
                                                                  force=True), check_update=False)
    Tracker, HostTracker, Recorder = _classes()
    if dcfg.strategy == "fsdp2_offload":
        Tracker = HostTracker
    made = []

    def tracker():
        made.append(Tracker(block, transients))
        return made[-1]

    with fp32_math.LOCK, _LOCK:  # the fp32 modes' lock first (experiments/replay.py says why)
        if dist.is_initialized():
            raise RuntimeError("a process group is initialised here already: replay in a process of its own")
        dist.init_process_group("fake", rank=0, world_size=dcfg.world_size, store=FakeStore())
        try:
            mesh = init_device_mesh("cpu", (dcfg.world_size,))
            with FakeTensorMode(allow_non_fake_inputs=True):
                result = measure_rank(dcfg, 0, torch.device("cpu"),
                                      replay={"tracker": tracker, "recorder": Recorder, "mesh": mesh,
                                              "wrap_scaler": _NeverSkippingScaler})
        finally:
            dist.destroy_process_group()
    if result.get("oom") or result.get("peak_bytes") is None:
        raise RuntimeError(f"the replay did not finish: {result.get('oom')}")
    marks = replay_trace(made[-1].events)["marks"]
    steps = [i for i, p in enumerate(result["phases"]) if p["step"] >= 1 and i < len(marks)]
    at = max(steps, key=lambda i: marks[i]["peak_allocated_bytes"])
    categories = {k: int(v) for k, v in (result.get("breakdown") or {}).items()}
    return {"peak_bytes": int(result["peak_bytes"]), "peak_phase": result["peak_phase"], "categories": categories,
            "signatures": sorted(set(made[-1].signatures)),
            "allocator_peak_bytes": int(marks[at]["peak_allocated_bytes"]),
            "allocator_peak_phase": {"step": result["phases"][at]["step"], "phase": result["phases"][at]["phase"]}}
