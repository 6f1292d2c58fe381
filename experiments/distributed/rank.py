"""What one rank of a data-parallel run does: build, wrap (DDP, ZeRO-1 or FSDP2), train and measure, phase by phase.

Runs inside a process started by experiments/distributed/launch.py with torch.distributed already initialised. The
phases, the recorder and the training step are the single-device engine's (runner._Recorder,
training.train_step); this module adds the "wrap" phase, the rank's slice of the batch, and a storage tracker
that understands sharded (DTensor) parameters and communication buffers.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import time
import weakref

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from ..measure.run import _Recorder, _stats, release, summarize_peak, warm_up_cuda
from ..measure.tracker import CATEGORIES as BASE_CATEGORIES
from ..measure.tracker import StorageTracker, _Record
from ..training.models import build_model, make_batch
from ..training.step import TrainState, train_step
from ..training.strategies import AMP_DTYPES, float32_precision, make_optimizer, make_scaler

CATEGORIES = BASE_CATEGORIES + ("communication",)
BUCKET_CAP_MB = 25  # DDP's default gradient bucket size
FSDP = ("fsdp2_zero2", "fsdp2_zero3", "fsdp2_offload")

# Collectives whose buffers exist only to communicate: (argument index or "out", which tensors).
_GATHER_OUT = {"_allgather_base_": 0, "allgather_": 0, "all_gather_into_tensor": "out"}
_REDUCE_IN = {"_reduce_scatter_base_": 1, "reduce_scatter_tensor": 0, "allreduce_": 0}


def local(t):
    """The tensor that owns the memory: a DTensor's shard on this rank, else the tensor itself."""
    return t._local_tensor if isinstance(t, DTensor) else t


class ShardTracker(StorageTracker):
    """The engine's storage tracker for a rank: DTensors are counted by their local shard, collective buffers
    and all-gathered parameters are "communication", and storages FSDP2 resizes in place (its unsharded
    parameters are freed with `storage.resize_(0)`, which no dispatch mode sees) are re-read at every op.

    `device`: the rank's device. When it is not the CPU, storages in host memory (CPU offload's shards, their
    gradients, the optimizer state and its step) are counted apart (`host_*`): they are not in the device's peak,
    and summing them into it would show offload saving nothing."""

    host_apart = False  # subclasses that skip this __init__ (the fake-tensor replay's) keep everything together

    def __init__(self, budget_bytes: int | None = None, block: int = 1, device=None):
        super().__init__(budget_bytes=budget_bytes, block=block)
        self.watch: dict[int, object] = {}  # storage key -> weakref to a storage that FSDP2 resizes
        self.host_apart = device is not None and torch.device(device).type != "cpu"
        self.host: dict[int, _Record] = {}  # storage key -> record, host memory only (never in self.live)
        self.host_current = 0
        self.host_peak = 0
        self.host_peak_snapshot: dict[int, _Record] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.resync()
        out = super().__torch_dispatch__(func, types, args, kwargs)
        self._tag_communication(func, args, kwargs or {}, out)
        return out

    def storage_nbytes(self, func, args, t):
        return super().storage_nbytes(func, args, local(t))

    def track(self, t, tag, nbytes=None):
        t = local(t)
        if self.host_apart and t.device.type == "cpu":
            self._track_host(t, tag, nbytes)
        else:
            super().track(t, tag, nbytes)

    def _track_host(self, t, tag, nbytes=None) -> None:
        st = t.untyped_storage()
        key = st._cdata
        if key in self.host:
            return
        rec = self.host[key] = _Record(st.nbytes() if nbytes is None else nbytes, tag)
        self._refs[key] = weakref.ref(st, lambda _ref, key=key: self._free_host(key))
        self.host_current += rec.nbytes
        if self.host_current > self.host_peak:
            self.host_peak = self.host_current
            self.host_peak_snapshot = dict(self.host)

    def _free_host(self, key: int) -> None:
        rec = self.host.pop(key, None)
        self._refs.pop(key, None)
        if rec is not None:
            self.host_current -= rec.nbytes

    def retag(self, tensors, tag):
        tensors = [local(t) for t in tensors if isinstance(t, torch.Tensor)]
        super().retag(tensors, tag)
        for t in tensors if self.host_apart else ():
            rec = self.host.get(t.untyped_storage()._cdata)
            if rec is not None:
                rec.tag = tag

    def retag_live(self, from_tag: str, to_tag: str) -> None:
        super().retag_live(from_tag, to_tag)
        for rec in self.host.values() if self.host_apart else ():
            if rec.tag == from_tag:
                rec.tag = to_tag

    def begin_phase(self, tag: str) -> None:
        # What wrapping allocates beside the shards (DDP's gradient buckets) exists to communicate.
        super().begin_phase("communication" if tag == "_wrap" else tag)

    def by_category(self, records=None):
        totals = dict.fromkeys(CATEGORIES, 0)
        for rec in (self.live if records is None else records).values():
            totals[rec.tag if rec.tag in totals else "temporaries"] += rec.nbytes
        return totals

    def host_peak_by_category(self) -> dict[str, int]:
        return self.by_category(self.host_peak_snapshot)

    def reset_peak(self) -> None:
        """Start the run's peak here (the training steps), leaving the setup's build-then-shard moment out."""
        self.peak = self.current
        self.peak_snapshot = dict(self.live)
        if self.host_apart:
            self.host_peak = self.host_current
            self.host_peak_snapshot = dict(self.host)

    def resync(self) -> None:
        for key, ref in list(self.watch.items()):
            rec, storage = self.live.get(key), ref()
            if rec is None or storage is None:
                self.watch.pop(key, None)
                continue
            nbytes = -(-storage.nbytes() // self.block) * self.block
            if nbytes != rec.nbytes:
                self.current += nbytes - rec.nbytes
                # A new record, not a mutated one: the peak snapshot taken earlier keeps the size it saw.
                self.live[key] = type(rec)(nbytes, rec.tag)
                self.phase_peak = max(self.phase_peak, self.current)
                if self.current > self.peak:
                    self.peak = self.current
                    self.peak_snapshot = dict(self.live)

    def _tag_communication(self, func, args, kwargs, out) -> None:
        name = func.__name__.split(".")[0]
        tensors = []
        if func.namespace in ("c10d", "_c10d_functional"):
            where = _GATHER_OUT.get(name, _REDUCE_IN.get(name))
            if where == "out":
                tensors = [out]
            elif where is not None and len(args) > where:
                tensors = [args[where]]
        elif name == "split_with_sizes_copy" and args and self._tag_of(args[0]) == "communication":
            # FSDP2 copies the all-gathered flat buffer out into each parameter's unsharded storage
            # (torch.ops.fsdp.split_with_sizes_copy); those storages are resized in place from now on.
            tensors = [kwargs.get("out", args[-1])]
            for t in _flat(tensors):
                self.track(t, "communication")
                st = t.untyped_storage()
                self.watch[st._cdata] = _weak(st)
        for t in _flat(tensors):
            rec = self.live.get(t.untyped_storage()._cdata)
            if rec is not None:
                rec.tag = "communication"

    def _tag_of(self, t) -> str | None:
        rec = self.live.get(local(t).untyped_storage()._cdata) if isinstance(t, torch.Tensor) else None
        return None if rec is None else rec.tag


def _weak(storage):
    return weakref.ref(storage)


def _flat(items):
    for x in items:
        if isinstance(x, torch.Tensor):
            yield local(x)
        elif isinstance(x, (list, tuple)):
            yield from _flat(x)


class RankRecorder(_Recorder):
    """The single-device phase recorder, plus: the peak starts with step 1, and under accumulation only the
    last micro-batch synchronises gradients (DDP's no_sync / FSDP2's set_requires_gradient_sync)."""

    set_sync = None
    accum = 1

    @contextlib.contextmanager
    def __call__(self, name: str, step: int, micro: int | None = None):
        if name == "zero_grad" and step == 1:
            self.tracker.reset_peak()
        if name == "forward" and self.set_sync is not None:
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


def wrap(model, strategy: str, cfg, device: torch.device, mesh=None):
    if strategy in ("ddp", "ddp_zero1"):
        from torch.nn.parallel import DistributedDataParallel

        ids = [device.index] if device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids, bucket_cap_mb=BUCKET_CAP_MB)
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    # AMP under FSDP2 is its mixed-precision policy: the gathered parameters are bf16/fp16, reduction in fp32.
    mp = MixedPrecisionPolicy(param_dtype=AMP_DTYPES[cfg.precision], reduce_dtype=torch.float32) \
        if cfg.precision in AMP_DTYPES else MixedPrecisionPolicy()
    kwargs = {"reshard_after_forward": strategy != "fsdp2_zero2", "mp_policy": mp}
    if mesh is not None:  # the replay on fake tensors builds its mesh outside the fake mode
        kwargs["mesh"] = mesh
    if strategy == "fsdp2_offload":
        # Pinned host memory is for fast copies to a GPU; the replay on fake CPU tensors (mesh given) has none.
        kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=mesh is None)
    for block in model.blocks:  # one all-gather per block: only one block's parameters are whole at a time
        fully_shard(block, **kwargs)
    fully_shard(model, **kwargs)
    return model


def make_rank_optimizer(cfg, model, strategy: str):
    if strategy == "ddp_zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer

        probe = make_optimizer(cfg, [torch.zeros(1, requires_grad=True)])
        # AdamW's defaults name one setting its constructor does not take (decoupled_weight_decay).
        accepted = inspect.signature(type(probe)).parameters
        return ZeroRedundancyOptimizer(model.parameters(), optimizer_class=type(probe),
                                       **{k: v for k, v in probe.defaults.items() if k in accepted})
    return make_optimizer(cfg, model.parameters())


def rank_batch(dcfg, rank: int, device: torch.device):
    """This rank's slice of the global batch (made from the seed exactly as the single-device run makes it)."""
    x, y = make_batch(dcfg.global_config, torch.device("cpu"), dcfg.config.seed + 1)
    b = dcfg.per_rank_batch
    return x[rank * b:(rank + 1) * b], y[rank * b:(rank + 1) * b]


def measure_rank(dcfg, rank: int, device: torch.device, progress=None, replay: dict | None = None) -> dict:
    """Every phase of this rank, like runner.run_experiment measures a single device.

    `replay`: {"tracker": factory, "recorder": class, "mesh": DeviceMesh, "wrap_scaler": callable} when
    experiments/distributed/replay.py runs this on fake tensors (there are no losses to read then)."""
    cfg = dcfg.rank_config
    cuda = device.type == "cuda"
    with ShardTracker():
        torch.empty(0)
    if cuda:
        gc.collect()
        torch.cuda.empty_cache()
        warm_up_cuda(device)
    replay = replay or {}
    tracker = replay["tracker"]() if "tracker" in replay else ShardTracker(device=device)
    total = 4 + cfg.steps * (2 + 2 * cfg.accum) + (1 if cfg.timing_steps else 0)
    rec = replay.get("recorder", RankRecorder)(device, tracker, progress, None, total)
    rec.accum = cfg.accum
    result = {"rank": rank, "phases": rec.phases, "baseline_bytes": torch.cuda.memory_allocated(device) if cuda else 0,
              "peak_bytes": None, "peak_phase": None, "setup_peak_bytes": None, "step_ms": None, "breakdown": None,
              "breakdown_steady": None, "host_breakdown": None, "host_peak_bytes": None, "oom": None, "losses": [],
              "driver": None}
    xs, ys = rank_batch(dcfg, rank, device)
    holder: dict = {}
    try:
        with float32_precision(cfg):
            _train(dcfg, cfg, device, rec, tracker, holder, xs, ys, result, replay or None)
    except torch.OutOfMemoryError as e:
        result["oom"] = {"phase": rec.current[0], "step": rec.current[1], "message": str(e).split("\n")[0][:600],
                         "in_use_bytes": rec.phases[-1]["peak_bytes"] if rec.phases else None}
        del e
    finally:
        release(rec, holder, device)
    steps = [p for p in rec.phases if p["step"] >= 1]
    setup = [p for p in rec.phases if p["step"] == 0]
    if setup:
        result["setup_peak_bytes"] = max(p["peak_bytes"] for p in setup)
    summarize_peak(result, steps, tracker, cuda)  # the training steps: every rank builds the whole model first
    return result


def _train(dcfg, cfg, device, rec, tracker, holder, xs, ys, result, replay=None) -> None:
    strategy = dcfg.strategy
    torch.manual_seed(cfg.seed)
    with tracker:
        with rec("model", 0):
            holder["model"] = build_model(cfg, device)
        tracker.param_keys = {p.untyped_storage()._cdata for p in holder["model"].parameters()}
        with rec("wrap", 0):
            holder["model"] = wrap(holder["model"], strategy, cfg, device, (replay or {}).get("mesh"))
        params = list(holder["model"].parameters())
        tracker.retag(params, "parameters")
        tracker.param_keys = {local(p).untyped_storage()._cdata for p in params}
        with rec("optimizer", 0):
            holder["optimizer"] = make_rank_optimizer(cfg, holder["model"], strategy)
            holder["scaler"] = make_scaler(cfg, device)
            if replay and holder["scaler"] is not None:  # fake tensors have no values to decide a skip on
                holder["scaler"] = replay["wrap_scaler"](holder["scaler"])
        with rec("data", 0):
            holder["inputs"], holder["targets"] = xs.to(device).clone(), ys.to(device).clone()
        state = TrainState(cfg, device, holder["model"], _StateView(holder["optimizer"]), holder["scaler"],
                           holder["inputs"], holder["targets"])
        rec.set_sync = sync_setter(holder["model"], strategy)
        holder["state"] = rec.state = state
        for step in range(1, cfg.steps + 1):
            loss = train_step(state, step, rec)
            if replay is None:
                result["losses"].append(float(loss))
            del loss
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
        result["step_ms"] = _stats(_time_steps(state, cfg.timing_steps, sync_phase(rec.set_sync, cfg.accum)))
        rec.tick("timing")


class _StateView:
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


def _time_steps(state: TrainState, n: int, phase) -> list[float]:
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


def check_update(dcfg, rank: int, device: torch.device, tamper=None) -> dict | None:
    """One step sharded vs one step on a single device (same seed, same global batch): do the parameters agree,
    element by element, within what reordered sums allow (experiments/distributed/update_check.py)?

    Every rank takes part (FSDP2 gathers); rank 0 also runs the single-device baseline and answers.
    `tamper(model, strategy)`, called on every rank after wrapping, lets a test break the data-parallel step."""
    from ..training.step import build_state
    from .update_check import compare, compute_eps, summed_terms

    cfg = dcfg.rank_config
    with float32_precision(cfg):
        grad_eps = compute_eps(cfg.precision, device.type, cfg.model)
        torch.manual_seed(cfg.seed)
        model = wrap(build_model(cfg, device), dcfg.strategy, cfg, device)
        if tamper is not None:
            tamper(model, dcfg.strategy)
        xs, ys = rank_batch(dcfg, rank, device)
        state = TrainState(cfg, device, model, make_rank_optimizer(cfg, model, dcfg.strategy),
                           make_scaler(cfg, device), xs.to(device), ys.to(device))
        train_step(state, 0, sync_phase(sync_setter(model, dcfg.strategy), cfg.accum))
        after = full_parameters(model, dcfg.strategy)
        rank_grads = full_parameters(model, dcfg.strategy, grads=True)
        del state, model
        if rank != 0:
            return None
        base = build_state(dcfg.global_config.replace(device=device.type), device)
        before = [p.detach().float().cpu().clone() for p in base.model.parameters()]
        train_step(base)
        expected = [p.detach().float().cpu().clone() for p in base.model.parameters()]
        # After the step: GradScaler unscaled them in place, so these are the gradients the step used.
        grads = [None if p.grad is None else p.grad.detach().float().cpu() for p in base.model.parameters()]
        param_eps = torch.finfo(next(base.model.parameters()).dtype).eps
        optimizer = base.optimizer
    del base
    return compare(after, expected, before, grads, optimizer, grad_eps, param_eps, summed_terms(dcfg.global_config),
                   rank_grads)
