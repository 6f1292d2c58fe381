"""The exact tensor-memory estimate: the real training step, replayed on fake tensors.

Under FakeTensorMode every op computes shapes and dtypes but no numbers, so two steps of any
configuration take well under a second, yet allocate and free storages exactly as a real run does.
The engine's own StorageTracker and phase recorder watch the replay, so the estimate has the same
phases and categories as a measurement. On CPU this *is* the measurement (the CPU runner counts the
same storages); for CUDA the allocator's 512-byte blocks are applied (see estimator.py).
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from .config import ExperimentConfig
from .runner import _Recorder, train_phases
from .strategies import float32_precision
from .tracker import StorageTracker

_FULL_SIZE_REDUCTIONS = {torch.ops.aten.mse_loss.default}


class _ReplayTracker(StorageTracker):
    """The storage tracker, corrected where a meta kernel allocates less than the real kernel does."""

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


def replay(cfg: ExperimentConfig, block: int = 1, fake_device: str = "cpu") -> dict:
    """Two steps of cfg on fake tensors. `block`: round every storage up to a multiple of it (512 for CUDA).

    `fake_device="cuda"` dispatches as CUDA does (autocast's CUDA op lists, CUDA attention kernels); it needs
    a CUDA build of torch and creates a CUDA context, so only the worker process may use it.
    """
    cfg = cfg.replace(device="cpu", steps=2, timing_steps=0, budget_mb=None, force=True)
    device = torch.device(fake_device)
    tracker = _ReplayTracker(block=block)
    # The recorder reads the tracker, never the CUDA allocator: nothing real is allocated.
    rec = _Recorder(torch.device("cpu"), tracker, None, None, 0)
    holder: dict = {}
    with FakeTensorMode(allow_non_fake_inputs=True), float32_precision(cfg):
        train_phases(cfg, device, rec, tracker, holder, None, wrap_scaler=_NeverSkippingScaler)
        categories, steady = tracker.peak_by_category(), tracker.by_category()
        rec.state = None
        holder.clear()
    top = max(rec.phases, key=lambda p: p["peak_bytes"])
    return {"peak_bytes": top["peak_bytes"], "peak_phase": top["phase"], "categories": categories,
            "steady": steady, "phases": rec.phases}
