"""Where autograd sums two gradients in place, so that a tracked step allocates what a plain one does.

Where two gradients of one tensor meet in backward (a residual connection, a tied embedding), PyTorch's engine adds
the new one into the one its input buffer already holds, in place, when it holds the only reference to that tensor
and its storage (torch/csrc/autograd/input_buffer.cpp, `can_accumulate_inplace`). While any TorchDispatchMode is
active every tensor counts as a subclass there, so under our tracker (and on fake tensors) the engine allocates a new
tensor for each such sum instead: one gradient more than a plain loop holds at that moment (a 486 MB bf16 activation
gradient per ViT-B/16 layer at batch 802; a 1 GB fp32 embedding gradient for a 256,000-word tied vocabulary).

The tracker sees the engine's sum as `aten.add.Tensor(old, new)` during backward with grad mode off. Whether the
engine alone holds `old` is read from its reference counts: the tensor's, its storage's and its Python object's.
What "alone" reads as depends on the torch release, so it is measured once per process on a small graph whose sums
a plain engine makes in place (`baseline`), never assumed.

Off unless GML_SUMS_IN_PLACE=1 (read at import, so that a trial's or a worker's process inherits it). Equal to the
profiler's record of a plain step on the CPU (tests/engine/test_engine_sums.py), and on an H100 the engine with it on
equals a plain loop to the byte where it was 1.43 % above (docs/gpu-tests-h100-2026-12-08.txt). It is still off because
"What fits" leaned on the extra gradient: summed in place, ResNet-50's answer on an emulated RTX 4060 rose from 143 (its
measured boundary) to 158, its reserved figure 6 % under the measured one, for lack of the cuDNN workspaces a CPU
replay cannot measure (docs/benchmarks/fits-boundary.md, "Summing in place, again").
"""

from __future__ import annotations

import os
import sys
import threading

import torch
import torch.utils._python_dispatch
from torch.utils._python_dispatch import TorchDispatchMode

_add = torch.ops.aten.add.Tensor
_LOCK = threading.Lock()
_BASELINE: list = []
ENABLED = os.environ.get("GML_SUMS_IN_PLACE") == "1"


def counts(t: torch.Tensor) -> tuple[int, int, int]:
    """(tensor, Python object, storage) reference counts, as read inside a dispatch handler. The extra references of
    this call (the handler's frame, `untyped_storage()`'s object) are the same in the calibration and in use."""
    return t._use_count(), sys.getrefcount(t), torch._C._storage_Use_Count(t.untyped_storage()._cdata)


def _dense(t: torch.Tensor) -> bool:
    return t.is_contiguous() or t.is_contiguous(memory_format=torch.channels_last)


def is_engine_sum(func, args, kwargs) -> bool:
    """An add the engine's input buffer makes: in backward, grad mode off, two dense tensors of one shape and dtype,
    no `alpha`."""
    if func is not _add or kwargs or len(args) != 2 or torch._C._current_graph_task_id() == -1:
        return False
    if torch.is_grad_enabled():
        return False
    a, b = args
    return (
        isinstance(a, torch.Tensor)
        and isinstance(b, torch.Tensor)
        and a.shape == b.shape
        and a.dtype == b.dtype
        and not a.is_sparse
        and not b.is_sparse
        and _dense(a)
    )


class _Probe(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.seen: list[tuple[int, int, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if is_engine_sum(func, args, kwargs):
            self.seen.append(counts(args[0]))
        return func(*args, **kwargs)


def baseline() -> tuple[int, int, int] | None:
    """The reference counts of a gradient only the engine holds, measured on a graph where a plain engine sums in
    place (two branches of one tensor meet); None if this torch made no such sum (then nothing is summed in place)."""
    with _LOCK:
        if not _BASELINE:
            # Outside any mode (a fake one would make the probe's tensors fake; ours would count them).
            with torch.utils._python_dispatch._disable_current_modes(), torch.enable_grad():
                x = torch.ones(4, 8, requires_grad=True)
                probe = _Probe()
                with probe:
                    h = x * 2
                    y = torch.relu(h) * 3 + h.sin()
                    (y * y).sum().backward()
            found = set(probe.seen)
            _BASELINE.append(found.pop() if len(found) == 1 else None)
        return _BASELINE[0]


def sums_in_place(func, args, kwargs) -> bool:
    """Whether a plain engine would make this add in place: it is the engine's sum and the engine alone holds its
    first operand. The caller then adds in place and returns that operand."""
    if not ENABLED or not is_engine_sum(func, args, kwargs):
        return False
    ref = _BASELINE[0] if _BASELINE else None  # measured when the tracker was made (a handler cannot run backward)
    return ref is not None and counts(args[0]) == ref
