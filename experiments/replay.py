"""The exact tensor-memory estimate: the real training step, replayed on fake tensors.

Under FakeTensorMode every op computes shapes and dtypes but no numbers, so two steps of any
configuration take well under a second, yet allocate and free storages exactly as a real run does.
The engine's own StorageTracker and phase recorder watch the replay, so the estimate has the same
phases and categories as a measurement. On CPU this *is* the measurement (the CPU runner counts the
same storages); for CUDA the allocator's 512-byte blocks are applied (see estimator.py).
"""

from __future__ import annotations

import contextlib
import threading

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

from . import fp32_math
from .config import ExperimentConfig
from .op_workspace import signature
from .runner import _Recorder, train_phases
from .strategies import float32_precision
from .tracker import StorageTracker

_FULL_SIZE_REDUCTIONS = {torch.ops.aten.mse_loss.default}
# cuDNN's ops: with PyTorch's defaults their fp32 arithmetic runs in TF32 while matmuls' does not.
_CONVOLUTIONS = {torch.ops.aten.convolution, torch.ops.aten.convolution_backward}
_LOCK = threading.Lock()


# Ops that launch no kernel: views, metadata and the profiler's markers.
_NO_KERNEL = ("view", "_unsafe_view", "t", "detach", "slice", "select", "expand", "permute", "transpose",
              "unsqueeze", "squeeze", "as_strided", "alias", "reshape", "split", "unbind", "chunk", "device",
              "_record_function_enter_new", "_record_function_exit", "lift_fresh", "split_with_sizes")


def _tensor_bytes(tree) -> int:
    return sum(t.numel() * t.element_size() for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor))


class _ReplayTracker(StorageTracker):
    """The storage tracker, corrected where a meta kernel allocates less than the real kernel does, and counting
    the kernels and bytes a step moves while `counting` is on (for the step-time prediction)."""

    counting = False
    kernels = 0
    bytes_moved = 0
    flops = 0
    conv_flops = 0

    def __init__(self, block: int = 1, transients: dict[str, int] | None = None):
        super().__init__(block=block)
        self.events: list[tuple[str, int, int]] = []  # the allocation trace, for the allocator model
        self.transients = transients or {}  # op signature -> scratch bytes measured on the device
        self.signatures: list[str] = []
        self._scratch = 0

    def track(self, t: torch.Tensor, tag: str, nbytes: int | None = None) -> None:
        key = t.untyped_storage()._cdata
        if key not in self.live:
            self.events.append(("alloc", key, t.untyped_storage().nbytes() if nbytes is None else nbytes))
        super().track(t, tag, nbytes)

    def _free(self, key: int) -> None:
        if key in self.live:
            self.events.append(("free", key, 0))
        super()._free(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = super().__torch_dispatch__(func, types, args, kwargs)
        sig = signature(func, args, kwargs)
        if sig is not None:
            self.signatures.append(sig)
            self._hold_scratch(self.transients.get(sig, 0))
        if self.counting and func.__name__.split(".")[0] not in _NO_KERNEL:
            self.kernels += 1
            self.bytes_moved += _tensor_bytes((args, kwargs)) + _tensor_bytes(out)
            # FlopCounterMode's own formulas, without its module hooks (they would change what autograd keeps).
            count = flop_registry.get(func._overloadpacket)
            if count is not None:
                n = count(*args, **(kwargs or {}), out_val=out)
                self.flops += n
                if func._overloadpacket in _CONVOLUTIONS:
                    self.conv_flops += n
        return out

    def _hold_scratch(self, nbytes: int) -> None:
        """A library's scratch buffer, alive only while its op runs: in the peak, never in a category."""
        if nbytes <= 0:
            return
        self._scratch -= 1
        self.events += [("alloc", self._scratch, nbytes), ("free", self._scratch, 0)]
        nbytes = -(-nbytes // self.block) * self.block
        self.phase_peak = max(self.phase_peak, self.current + nbytes)
        if self.current + nbytes > self.peak:
            self.peak = self.current + nbytes
            self.peak_snapshot = dict(self.live)
            self.scratch_at_peak = nbytes

    scratch_at_peak = 0

    def storage_nbytes(self, func, args, t: torch.Tensor) -> int:
        if func in _FULL_SIZE_REDUCTIONS and t.dim() == 0 and len(args) >= 2:
            # The real kernel allocates its output at the broadcast shape and resize_s it to 0-dim; the
            # storage keeps that size (lessons/leaks). The meta kernel allocates the 0-dim result only.
            shape = torch.broadcast_shapes(args[0].shape, args[1].shape)
            return max(1, shape.numel()) * t.element_size()
        return super().storage_nbytes(func, args, t)


class _NeverSkippingScaler:
    """GradScaler with the same allocations, minus the `.item()` that decides whether to skip a step."""

    def __init__(self, scaler):
        self.scaler = scaler

    def scale(self, loss):
        return self.scaler.scale(loss)

    def step(self, optimizer):
        self.scaler.unscale_(optimizer)
        optimizer.step()
        self.scaler._per_optimizer_states.clear()

    def update(self):
        pass


class _StepRecorder(_Recorder):
    """The phase recorder that switches counting on for step 2, the steady-state step."""

    @contextlib.contextmanager
    def __call__(self, name: str, step: int, micro: int | None = None):
        self.tracker.counting = step == 2
        with super().__call__(name, step, micro):
            yield
        self.tracker.counting = False
        self.tracker.events.append(("mark", len(self.phases), 0))


def replay(cfg: ExperimentConfig, block: int = 1, fake_device: str = "cpu",
           transients: dict[str, int] | None = None) -> dict:
    """Two steps of cfg on fake tensors. `block`: round every storage up to a multiple of it (512 for CUDA).

    `fake_device="cuda"` dispatches as CUDA does (autocast's CUDA op lists, CUDA attention kernels); it needs
    a CUDA build of torch and creates a CUDA context, so only the worker process may use it.
    `transients`: scratch bytes per op signature measured on the device (experiments/op_workspace.py).
    """
    # Building a model touches process-wide settings (default dtype, matmul precision, seed). The fp32 modes' lock
    # first: the replay's own mode block takes it inside, and a run's block (holding it) may replay inside.
    with fp32_math.LOCK, _LOCK:
        return _replay(cfg, block, fake_device, transients)


def _replay(cfg: ExperimentConfig, block: int, fake_device: str, transients) -> dict:
    cfg = cfg.replace(device="cpu", steps=2, timing_steps=0, budget_mb=None, force=True)
    device = torch.device(fake_device)
    tracker = _ReplayTracker(block=block, transients=transients)
    # The recorder reads the tracker, never the CUDA allocator: nothing real is allocated.
    rec = _StepRecorder(torch.device("cpu"), tracker, None, None, 0)
    holder: dict = {}
    with FakeTensorMode(allow_non_fake_inputs=True), float32_precision(cfg):
        train_phases(cfg, device, rec, tracker, holder, None, wrap_scaler=_NeverSkippingScaler)
        categories, steady = tracker.peak_by_category(), tracker.by_category()
        rec.state = None
        holder.clear()
    top = max(rec.phases, key=lambda p: p["peak_bytes"])
    from .allocator_model import replay_trace

    # The tracker rounded sizes to blocks already; the model rounds the requests itself.
    allocator = replay_trace(tracker.events)
    step = {"flops": int(tracker.flops), "conv_flops": int(tracker.conv_flops), "kernels": tracker.kernels,
            "bytes": int(tracker.bytes_moved)}
    return {"peak_bytes": top["peak_bytes"], "peak_phase": top["phase"], "categories": categories,
            "steady": steady, "phases": rec.phases, "step": step, "allocator": allocator,
            "signatures": list(dict.fromkeys(tracker.signatures))}
