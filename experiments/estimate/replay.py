"""The exact tensor-memory estimate: the real training step, replayed on fake tensors.

Under FakeTensorMode every op computes shapes and dtypes but no numbers, so two steps of any
configuration take well under a second, yet allocate and free storages exactly as a real run does.
The engine's own tracker, phase recorder and setup recipe run the replay, so the estimate has the same phases and
categories as a measurement. On CPU this *is* the measurement (the CPU runner counts the same storages); for CUDA
the allocator's 512-byte blocks are applied (see estimator.py). What only a replay needs listens to the tracker:
the allocation log (for the caching-allocator model), the kernels' scratch memory and the step's work.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import traceback

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._pytree import tree_flatten

from ..core.config import ExperimentConfig
from ..core.finetune import PAGED_OPTIMIZERS
from ..core.workspace_table import sizes
from ..measure.flops import formulas
from ..measure.phases import PhaseRecorder
from ..measure.tracker import MemoryTracker
from ..training import fp32_math
from ..training.models import ModelSpec, spec_for
from ..training.source_models import SourceSpec
from ..training.step import Setup, TrainState, train
from ..training.strategies import float32_precision
from . import bnb_quirks, micro_batches, quirks
from .allocator_model import AllocationLog, replay_trace
from .cpu_kernels import cpu_kernels
from .cuda_autocast import UnknownAutocastPolicy, cuda_autocast
from .cuda_kernels import cuda_kernels, scratch_as_cuda
from .unpredictable import CannotPredict, NotPredicted, classify
from .workspaces import signature

FLOP_FORMULAS = formulas()
DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
_FULL_SIZE_REDUCTIONS = {torch.ops.aten.mse_loss.default}
# cuDNN's ops: with PyTorch's defaults their fp32 arithmetic runs in TF32 while matmuls' does not.
_CONVOLUTIONS = {torch.ops.aten.convolution, torch.ops.aten.convolution_backward}
_LOCK = threading.Lock()


# Ops that launch no kernel: views, metadata and the profiler's markers.
_NO_KERNEL = (
    "view",
    "_unsafe_view",
    "t",
    "detach",
    "slice",
    "select",
    "expand",
    "permute",
    "transpose",
    "unsqueeze",
    "squeeze",
    "as_strided",
    "alias",
    "reshape",
    "split",
    "unbind",
    "chunk",
    "device",
    "_record_function_enter_new",
    "_record_function_exit",
    "lift_fresh",
    "split_with_sizes",
)


def _tensor_bytes(tree) -> int:
    return sum(t.numel() * t.element_size() for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor))


def fake_kernel_bytes(func, args, t: torch.Tensor) -> int:
    """The bytes behind an op's output where a meta kernel allocates less than the real kernel does."""
    if func in _FULL_SIZE_REDUCTIONS and t.dim() == 0 and len(args) >= 2:
        # The real kernel allocates its output at the broadcast shape and resize_s it to 0-dim; the
        # storage keeps that size (lessons/leaks). The meta kernel allocates the 0-dim result only.
        shape = torch.broadcast_shapes(args[0].shape, args[1].shape)
        return max(1, shape.numel()) * t.element_size()
    return t.untyped_storage().nbytes()


class Scratch:
    """A tracker listener: the signature of every op whose kernel takes scratch memory, and that memory (measured on
    the device, experiments/estimate/workspaces.py) held while the op runs."""

    def __init__(self, transients: dict | None = None, rule=None):
        self.transients = transients or {}  # op signature -> its scratch allocations measured on the device
        self.rule = (
            rule  # (func, args, out, kwargs) -> buffers held together, known without measuring (cuda_kernels.py)
        )
        self.signatures: list[str] = []

    def after_op(self, tracker, func, args, kwargs, out) -> None:
        sig = signature(func, args, kwargs)
        if sig is not None:
            self.signatures.append(sig)
        if sig in self.transients:  # measured on the device: it replaces what a rule would compute
            for nbytes in sizes(self.transients[sig]):
                tracker.hold_scratch(nbytes)
        elif self.rule is not None:
            tracker.hold_scratch(*self.rule(func, args, out, kwargs))


class StepCounter:
    """A tracker listener: the kernels, the bytes they move and the FLOPs of one step (the steady state, step 2),
    for the step-time prediction (experiments/estimate/steptime.py)."""

    def __init__(self, step: int = 2):
        self.step = step
        self.counting = False
        self.kernels = self.bytes_moved = self.flops = self.conv_flops = 0
        self.micro_work: dict[str, int] = {}  # the last replayed micro-batch's share (micro_batches.py)
        self._start: dict | None = None

    def phase_started(self, tracker, name: str, step: int, micro: int | None) -> None:
        self.counting = step == self.step
        self._start = self.figures() if self.counting and micro == micro_batches.REPLAYED - 1 else None

    def phase_ended(self, tracker, name: str, step: int, micro: int | None, index: int) -> None:
        if self._start is not None:
            for k, v in self.figures().items():
                self.micro_work[k] = self.micro_work.get(k, 0) + v - self._start[k]
            self._start = None
        self.counting = False

    def after_op(self, tracker, func, args, kwargs, out) -> None:
        if self.counting and func.__name__.split(".")[0] not in _NO_KERNEL:
            self.kernels += 1
            self.bytes_moved += _tensor_bytes((args, kwargs)) + _tensor_bytes(out)
            # FlopCounterMode's own formulas, without its module hooks (they would change what autograd keeps).
            count = FLOP_FORMULAS.get(func._overloadpacket)
            if count is not None:
                n = count(*args, **kwargs, out_val=out)
                self.flops += n
                if func._overloadpacket in _CONVOLUTIONS:
                    self.conv_flops += n

    def figures(self) -> dict:
        return {
            "flops": int(self.flops),
            "conv_flops": int(self.conv_flops),
            "kernels": self.kernels,
            "bytes": int(self.bytes_moved),
        }


_prim_device = torch.ops.prim.device.default


class ReplayTracker(MemoryTracker):
    """The tracker of a replay. Autograd's C++ engine asks a fake tensor for its device through the dispatcher: about
    two thirds of a transformer step's dispatches, none of which allocates; they pass straight through (half a
    Llama-shaped replay's CPU time)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is _prim_device:
            return func(*args, **(kwargs or {}))
        return super().__torch_dispatch__(func, types, args, kwargs)


def replay_tracker(
    block: int = 1, transients: dict[str, tuple[int, ...]] | None = None, sizer=fake_kernel_bytes, **kwargs
):
    """(the tracker of a replay, its allocation log, its scratch listener): storages rounded to `block`, fake
    kernels corrected; with CUDA's blocks (`block` > 1), the scratch of CUDA kernels that are composites. `kwargs`: the
    tracker's own options (a rank's categories and shards, ...)."""
    log, scratch = AllocationLog(), Scratch(transients, scratch_as_cuda if block > 1 else None)
    listeners = [log, scratch, *kwargs.pop("listeners", ())]
    return ReplayTracker(block=block, listeners=listeners, sizer=sizer, **kwargs), log, scratch


def source_sizer(device_type: str):
    """fake_kernel_bytes plus the normalisation statistics the fake kernels size wrong (quirks.py, 3)."""

    def sizer(func, args, t):
        fixed = quirks.stat_nbytes(func, args, t, device_type)
        if fixed is None and device_type == "cpu":
            fixed = quirks.rnn_workspace_nbytes(func, args, t)
        return fixed if fixed is not None else fake_kernel_bytes(func, args, t)

    return sizer


@contextlib.contextmanager
def own_model_replay(spec: ModelSpec):
    """The neutralisations a model of one's own needs (quirks.py); nothing for the built-in families. A fake kernel
    that refuses its inputs logs a traceback before raising: the result reports it instead."""
    if not isinstance(spec, SourceSpec):
        with quirks.every_model():
            yield None
        return
    log = logging.getLogger("torch._subclasses.fake_tensor")
    old = log.level
    log.setLevel(logging.CRITICAL)
    try:
        with quirks.neutralised(with_transformers=spec.kind == "hf") as report:
            yield report
    finally:
        log.setLevel(old)


class NeverSkippingScaler:
    """GradScaler with the same allocations, minus the `.item()` that decides whether to skip a step. A fused
    optimizer (`_step_supports_amp_scaling`) reads no value: the scaler's own step, whose path (the infs checked
    against a scale of 1, the scale and the infs handed to the kernel) allocates otherwise than unscale_."""

    def __init__(self, scaler):
        self.scaler = scaler

    def scale(self, loss):
        return self.scaler.scale(loss)

    def step(self, optimizer):
        if getattr(optimizer, "_step_supports_amp_scaling", False):
            self.scaler.step(optimizer)
            self.scaler._per_optimizer_states.clear()
            return
        self.scaler.unscale_(optimizer)
        optimizer.step()
        self.scaler._per_optimizer_states.clear()

    def update(self):
        pass


def replay(
    cfg: ExperimentConfig,
    block: int = 1,
    fake_device: str = "cpu",
    transients: dict[str, tuple[int, ...]] | None = None,
    spec: ModelSpec | None = None,
    keep_events: bool = False,
) -> dict:
    """Two steps of cfg on fake tensors. `block`: round every storage up to a multiple of it (512 for CUDA).

    `fake_device="cuda"` dispatches as CUDA does (autocast's CUDA op lists, CUDA attention kernels); it needs
    a CUDA build of torch and creates a CUDA context, so only the worker process may use it.
    `transients`: scratch allocations per op signature measured on the device (experiments/estimate/workspaces.py).
    `spec`: the model, where the configuration does not name it (an import path, from the command line).
    `keep_events`: the allocation trace in the result (`events`; experiments/estimate/fast_replay.py reads it).
    Raises CannotPredict (one line naming the op and the module) for what fake tensors cannot replay.
    """
    # Building a model touches process-wide settings (default dtype, matmul precision, seed). The fp32 modes' lock
    # first: the replay's own mode block takes it inside, and a run's block (holding it) may replay inside.
    if cfg.accum > micro_batches.REPLAYED and not keep_events:  # the repeated micro-batches from four
        with fp32_math.LOCK, _LOCK:
            out = _replay(cfg, block, fake_device, transients, spec, micro_batches.REPLAYED)
        out.pop("events")
        extended = micro_batches.extend(out, cfg.accum)
        if extended is not None:
            extended.pop("micro_work")
            return extended
    with fp32_math.LOCK, _LOCK:
        out = _replay(cfg, block, fake_device, transients, spec)
    out.pop("micro_work")
    events = out.pop("events")
    if keep_events:
        out["events"] = events
    return out


def _replay(cfg: ExperimentConfig, block: int, fake_device: str, transients, spec, micros: int | None = None) -> dict:
    cfg = cfg.replace(device="cpu", steps=2, timing_steps=0, budget_mb=None, force=True)
    spec = spec or spec_for(cfg)
    own = isinstance(spec, SourceSpec)
    counter = StepCounter()
    sizer = source_sizer("cuda" if block > 1 or fake_device == "cuda" else "cpu") if own else fake_kernel_bytes
    tracker, log, scratch = replay_tracker(block, transients, sizer=sizer, listeners=[counter])
    # The recorder reads the tracker, never the CUDA allocator: nothing real is allocated.
    rec = PhaseRecorder(torch.device("cpu"), tracker)
    state = TrainState(cfg, torch.device(fake_device), spec=spec, micro_batches=micros)
    # A CUDA estimate replayed on fake CPU tensors casts and calls attention as CUDA does (cuda_autocast.py,
    # cuda_kernels.py); a CPU estimate takes the CPU kernels' answers where a fake kernel is stricter (cpu_kernels.py).
    as_cuda = block > 1 and fake_device == "cpu"
    with (
        FakeTensorMode(allow_non_fake_inputs=True),
        float32_precision(cfg),
        own_model_replay(spec) as report,
        cuda_autocast(as_cuda),
        cuda_kernels(as_cuda),
        cpu_kernels(block == 1 and fake_device == "cpu", quirks.DISABLED),
        bnb_quirks.paged_state(tracker) if as_cuda and cfg.optimizer in PAGED_OPTIMIZERS else contextlib.nullcontext(),
        quirks.offloaded(tracker) if as_cuda else contextlib.nullcontext(),
        bnb_quirks.int8_cuda_path() if as_cuda and cfg.finetune == "int8" else contextlib.nullcontext(),
        bnb_quirks.loaded_onto_gpu() if as_cuda and cfg.finetune in ("qlora", "int8") else contextlib.nullcontext(),
    ):
        try:
            train(state, rec, tracker, Setup(scaler=NeverSkippingScaler))
        except Exception as e:  # noqa: BLE001 - classified; anything that is not a replay's limit is re-raised
            known = own or isinstance(e, (UnknownAutocastPolicy, NotPredicted))
            info = classify(e, state.model, getattr(rec, "current", ("setup", 0))) if known else None
            rec.state = None
            state.clear()
            if info is None:
                raise
            traceback.clear_frames(e.__traceback__)
            raise CannotPredict(info) from None
        categories, steady = tracker.peak_by_category(), tracker.by_category()
        paged, host_peak = tracker.host_current, tracker.host_peak
        n_params = sum(p.numel() for p in state.model.parameters())
        n_trainable = sum(p.numel() for p in state.model.parameters() if p.requires_grad)
        dtypes = sorted({DTYPE_NAMES.get(p.dtype, str(p.dtype)) for p in state.model.parameters()})
        rec.state = None
        state.clear()
    top = max(rec.phases, key=lambda p: p["peak_bytes"])
    # The tracker rounded sizes to blocks already; the model rounds the requests itself.
    allocator = replay_trace(log.events, warm_up=True)  # the engine warms up before it runs
    return {
        "peak_bytes": top["peak_bytes"],
        "peak_phase": top["phase"],
        "categories": categories,
        "steady": steady,
        "phases": rec.phases,
        "step": counter.figures(),
        "micro_work": counter.micro_work,
        "allocator": allocator,
        "signatures": list(dict.fromkeys(scratch.signatures)),
        # What the model phase allocated: the parameters as the setup builds them, and their dtypes.
        "parameters": {
            "bytes": rec.phases[0]["allocated_bytes"],
            "dtypes": dtypes,
            "count": n_params,
            "trainable": n_trainable,
        },
        "neutralised": report.to_dict() if report is not None else None,
        # Off the device's books: a paged optimizer's state in CUDA managed memory (quirks.py, 8).
        "paged_bytes": paged,
        # Host memory at its peak: that paged state and the activations save_on_cpu offloads (quirks.py, 9).
        "host_peak_bytes": host_peak,
        "events": log.events,
    }
