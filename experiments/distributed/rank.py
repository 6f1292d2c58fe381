"""What one rank of a data-parallel run does: build, wrap (DDP, ZeRO-1 or FSDP2), train and measure, phase by phase.

Runs inside a process started by experiments/distributed/launch.py with torch.distributed already initialised. The
phases, the recorder, the setup recipe and the training step are the single-device engine's
(experiments/measure/phases.py, experiments/training/step.py); this module adds the "wrap" phase, the rank's slice of
the batch, and what the memory tracker needs to understand sharded (DTensor) parameters and communication buffers
(the `Shards` listener).
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from ..core.vocabulary import RANK_TENSOR_CATEGORIES
from ..measure.device import warm_up_cuda
from ..measure.phases import PhaseRecorder
from ..measure.run import release, summarize_peak
from ..measure.timing import step_stats
from ..measure.tracker import MemoryTracker
from ..training.models import spec_for
from ..training.step import Setup, TrainState, train, train_step
from ..training.strategies import AMP_DTYPES, float32_precision, make_optimizer

BUCKET_CAP_MB = 25  # DDP's default gradient bucket size
FSDP = ("fsdp2_zero2", "fsdp2_zero3", "fsdp2_offload")

# Collectives whose buffers exist only to communicate: (argument index or "out", which tensors).
_GATHER_OUT = {"_allgather_base_": 0, "allgather_": 0, "all_gather_into_tensor": "out"}
_REDUCE_IN = {"_reduce_scatter_base_": 1, "reduce_scatter_tensor": 0, "allreduce_": 0}


def local(t):
    """The tensor that owns the memory: a DTensor's shard on this rank, else the tensor itself."""
    return t._local_tensor if isinstance(t, DTensor) else t


def _flat(items):
    for x in items:
        if isinstance(x, torch.Tensor):
            yield local(x)
        elif isinstance(x, (list, tuple)):
            yield from _flat(x)


class Shards:
    """A listener of a rank's memory tracker: collective buffers and all-gathered parameters are "communication",
    and the storages FSDP2 resizes in place (its unsharded parameters are freed with `storage.resize_(0)`, which no
    dispatch mode sees) are watched, so the tracker re-reads them at every op."""

    def after_op(self, tracker: MemoryTracker, func, args, kwargs, out) -> None:
        name = func.__name__.split(".")[0]
        tensors = []
        if func.namespace in ("c10d", "_c10d_functional"):
            where = _GATHER_OUT.get(name, _REDUCE_IN.get(name))
            if where == "out":
                tensors = [out]
            elif where is not None and len(args) > where:
                tensors = [args[where]]
        elif name == "split_with_sizes_copy" and args and _tag_of(tracker, args[0]) == "communication":
            # FSDP2 copies the all-gathered flat buffer out into each parameter's unsharded storage
            # (torch.ops.fsdp.split_with_sizes_copy); those storages are resized in place from now on.
            tensors = [kwargs.get("out", args[-1])]
            for t in _flat(tensors):
                tracker.track(t, "communication")
                tracker.watch_storage(t)
        for t in _flat(tensors):
            rec = tracker.live.get(t.untyped_storage()._cdata)
            if rec is not None:
                rec.tag = "communication"


def _tag_of(tracker: MemoryTracker, t) -> str | None:
    rec = tracker.live.get(local(t).untyped_storage()._cdata) if isinstance(t, torch.Tensor) else None
    return None if rec is None else rec.tag


def rank_options(device=None, listeners=()) -> dict:
    """What makes a memory tracker a rank's: DTensors counted by their local shard, communication buffers a category
    of their own (the Shards listener, then `listeners`). `device`: the rank's device; when it is not the CPU,
    storages in host memory (CPU offload's shards, their gradients, the optimizer state and its step) are counted
    apart (`host_*`): they are not in the device's peak, and summing them into it would show offload saving
    nothing."""
    return {
        "listeners": [Shards(), *listeners],
        "categories": RANK_TENSOR_CATEGORIES,
        "local": local,
        "host_apart": device is not None and torch.device(device).type != "cpu",
    }


class RankRecorder(PhaseRecorder):
    """The single-device phase recorder, plus: the peak starts with step 1, and under accumulation only the
    last micro-batch synchronises gradients (DDP's no_sync / FSDP2's set_requires_gradient_sync)."""

    def __init__(self, *args, strategy: str = "ddp", accum: int = 1, **kwargs):
        super().__init__(*args, **kwargs)
        self.strategy = strategy
        self.accum = accum
        self.set_sync = None

    @contextlib.contextmanager
    def __call__(self, name: str, step: int, micro: int | None = None):
        if name == "zero_grad" and step == 1:
            self.tracker.reset_peak()
        if name == "forward" and self.state is not None and self.state.model is not None:
            if self.set_sync is None:
                self.set_sync = sync_setter(self.state.model, self.strategy)
            self.set_sync(micro is None or micro == self.accum - 1)
        with super().__call__(name, step, micro):
            yield


def sync_setter(model, strategy: str):
    if strategy in FSDP:
        return model.set_requires_gradient_sync

    def ddp(flag: bool, model=model) -> None:
        model.require_backward_grad_sync = flag

    return ddp


def sync_phase(setter, accum: int):
    """A phase hook for un-instrumented steps that only does the accumulation's gradient-sync switching."""

    @contextlib.contextmanager
    def phase(name, step, micro=None):
        if name == "forward":
            setter(micro is None or micro == accum - 1)
        yield

    return phase


def wrap(model, strategy: str, cfg, device: torch.device, mesh=None, spec=None):
    """The model a rank trains. `spec`: the model's spec, which names the blocks FSDP2 shards one by one."""
    if strategy in ("ddp", "ddp_zero1"):
        from torch.nn.parallel import DistributedDataParallel

        ids = [device.index] if device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids, bucket_cap_mb=BUCKET_CAP_MB)
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    # AMP under FSDP2 is its mixed-precision policy: the gathered parameters are bf16/fp16, reduction in fp32.
    mp = (
        MixedPrecisionPolicy(param_dtype=AMP_DTYPES[cfg.precision], reduce_dtype=torch.float32)
        if cfg.precision in AMP_DTYPES
        else MixedPrecisionPolicy()
    )
    kwargs = {"reshard_after_forward": strategy != "fsdp2_zero2", "mp_policy": mp}
    if mesh is not None:  # the replay on fake tensors builds its mesh outside the fake mode
        kwargs["mesh"] = mesh
    if strategy == "fsdp2_offload":
        # Pinned host memory is for fast copies to a GPU; the replay on fake CPU tensors (mesh given) has none.
        kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=mesh is None)
    for block in (spec or spec_for(cfg)).blocks(model):  # one all-gather per block: one block whole at a time
        fully_shard(block, **kwargs)
    fully_shard(model, **kwargs)
    return model


def make_rank_optimizer(cfg, model, strategy: str):
    if strategy == "ddp_zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer

        probe = make_optimizer(cfg, [torch.zeros(1, requires_grad=True)])
        # AdamW's defaults name one setting its constructor does not take (decoupled_weight_decay).
        accepted = inspect.signature(type(probe)).parameters
        return ZeroRedundancyOptimizer(
            model.parameters(),
            optimizer_class=type(probe),
            **{k: v for k, v in probe.defaults.items() if k in accepted},
        )
    return make_optimizer(cfg, model.parameters())


class StateView:
    """The optimizer as train_step and the recorder use it; ZeRO's per-rank state lives in its inner optimizer."""

    def __init__(self, optimizer):
        self.optimizer = optimizer
        self.state = getattr(optimizer, "optim", optimizer).state

    def zero_grad(self, set_to_none: bool = True):
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self):
        self.optimizer.step()

    def __getattr__(self, name):
        return getattr(self.optimizer, name)


def rank_batch(dcfg, rank: int) -> tuple[dict, dict]:
    """This rank's slice of the global batch (made from the seed exactly as the single-device run makes it), on the
    CPU: (inputs, targets)."""
    cfg = dcfg.global_config
    inputs, targets = spec_for(cfg).batch(cfg, torch.device("cpu"), dcfg.config.seed + 1)
    b = dcfg.per_rank_batch
    return (
        {k: v[rank * b : (rank + 1) * b] for k, v in inputs.items()},
        {k: v[rank * b : (rank + 1) * b] for k, v in targets.items()},
    )


def rank_setup(
    dcfg, device: torch.device, inputs: dict, targets: dict, mesh=None, scaler=None, tamper=None, copy: bool = True
) -> Setup:
    """How a rank's setup differs from a single device's: the wrap, the rank's optimizer, its slice of the batch
    (copied onto the device; `copy`: as a fresh storage, what a measured rank holds). `scaler`: the replay's scaler.
    `tamper(model, strategy)`, after the wrap, lets a test break the data-parallel step."""
    cfg, strategy = dcfg.rank_config, dcfg.strategy

    def wrapped(model):
        model = wrap(model, strategy, cfg, device, mesh)
        if tamper is not None:
            tamper(model, strategy)
        return model

    def batch():
        def to(t):
            return t.to(device).clone() if copy else t.to(device)

        return {k: to(v) for k, v in inputs.items()}, {k: to(v) for k, v in targets.items()}

    return Setup(
        wrap=wrapped,
        optimizer=lambda cfg, model: StateView(make_rank_optimizer(cfg, model, strategy)),
        batch=batch,
        scaler=scaler,
    )


@dataclass(frozen=True)
class RankReplay:
    """What a replay of a rank on fake tensors (experiments/distributed/replay.py) hands measure_rank: its tracker,
    the device mesh it built outside the fake mode, and its scaler (fake tensors have no values to skip a step on)."""

    tracker: MemoryTracker
    mesh: object
    scaler: object


def measure_rank(dcfg, rank: int, device: torch.device, progress=None, replay: RankReplay | None = None) -> dict:
    """Every phase of this rank, like run_experiment measures a single device (there are no losses to read in a
    replay)."""
    cfg = dcfg.rank_config
    cuda = device.type == "cuda"
    with MemoryTracker():
        torch.empty(0)
    if cuda:
        gc.collect()
        torch.cuda.empty_cache()
        warm_up_cuda(device)
    tracker = replay.tracker if replay else MemoryTracker(**rank_options(device))
    total = 4 + cfg.steps * (2 + 2 * cfg.accum) + (1 if cfg.timing_steps else 0)
    rec = RankRecorder(device, tracker, progress, None, total, strategy=dcfg.strategy, accum=cfg.accum)
    result = {
        "rank": rank,
        "phases": rec.phases,
        "baseline_bytes": torch.cuda.memory_allocated(device) if cuda else 0,
        "peak_bytes": None,
        "peak_phase": None,
        "setup_peak_bytes": None,
        "step_ms": None,
        "breakdown": None,
        "breakdown_steady": None,
        "host_breakdown": None,
        "host_peak_bytes": None,
        "oom": None,
        "losses": [],
        "driver": None,
    }
    inputs, targets = rank_batch(dcfg, rank)
    how = rank_setup(dcfg, device, inputs, targets, replay and replay.mesh, replay and replay.scaler)
    state = TrainState(cfg, device)
    try:
        with float32_precision(cfg):
            on_loss = None if replay else (lambda loss: result["losses"].append(float(loss)))
            train(state, rec, tracker, how, on_loss)
            _after_steps(state, rec, tracker, result)
    except torch.OutOfMemoryError as e:
        result["oom"] = {
            "phase": rec.current[0],
            "step": rec.current[1],
            "message": str(e).split("\n")[0][:600],
            "in_use_bytes": rec.phases[-1]["peak_bytes"] if rec.phases else None,
        }
        del e
    finally:
        release(rec, state, device)
    steps = [p for p in rec.phases if p["step"] >= 1]
    setup = [p for p in rec.phases if p["step"] == 0]
    if setup:
        result["setup_peak_bytes"] = max(p["peak_bytes"] for p in setup)
    summarize_peak(result, steps, tracker, cuda)  # the training steps: every rank builds the whole model first
    return result


def _after_steps(state: TrainState, rec: RankRecorder, tracker: MemoryTracker, result: dict) -> None:
    cfg, device = state.cfg, state.device
    result["breakdown"] = tracker.peak_by_category()
    result["breakdown_steady"] = tracker.by_category()
    if tracker.host_apart:
        # Host memory of the training steps, at its own peak (CPU offload): a second series, never the device's.
        result["host_breakdown"] = tracker.host_peak_by_category()
        result["host_peak_bytes"] = tracker.host_peak
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        result["driver"] = {"free_bytes": free, "total_bytes": total}
    if cfg.timing_steps:
        setter = rec.set_sync or sync_setter(state.model, rec.strategy)
        result["step_ms"] = step_stats(time_rank_steps(state, cfg.timing_steps, sync_phase(setter, cfg.accum)))
        rec.tick("timing")


def time_rank_steps(state: TrainState, n: int, phase) -> list[float]:
    """Whole steps with their communication, timed after the measured ones (every rank times its own)."""
    cuda = state.device.type == "cuda"
    samples = []
    for _ in range(n):
        dist.barrier()  # every rank starts together, so a step's time is not another rank's lateness
        if cuda:
            torch.cuda.synchronize(state.device)
        t0 = time.perf_counter()
        train_step(state, 0, phase)
        if cuda:
            torch.cuda.synchronize(state.device)
        samples.append((time.perf_counter() - t0) * 1e3)
    return samples


def full_parameters(model, strategy: str, grads: bool = False) -> list[torch.Tensor | None]:
    """Every parameter (or its gradient) whole, on the CPU, in the module's order (a collective for FSDP2: all ranks
    call it)."""
    module = model.module if hasattr(model, "module") else model
    out = []
    for p in module.parameters():
        t = p.grad if grads else p
        if t is None:
            out.append(None)
            continue
        t = t.detach()
        if strategy in FSDP:
            if t.device.type == "cpu" and torch.cuda.is_available():
                # CPU-offloaded shards: NCCL gathers device tensors only, so the shard goes to this rank's GPU first.
                t = t.to(torch.device("cuda", torch.cuda.current_device()))
            t = t.full_tensor()
        out.append(t.float().cpu().clone())
    return out
