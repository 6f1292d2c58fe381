"""Fake kernels stricter than the CPU's real kernels, answered as the CPU kernel answers, in a CPU estimate only.

aten._grouped_mm (transformers' default MoE experts, `experts_implementation="grouped_mm"`): up to torch 2.14 its meta
kernel implements CUDA's checks, bf16 inputs only, so an MoE model in fp32 (or with fp32 experts under AMP) could not be
replayed while a real CPU run trains it. The CPU kernel takes fp32 and fp16 too and returns a new contiguous tensor of
the meta kernel's output shape, in the inputs' dtype (checked against the real kernel for the four 2-D/3-D layouts
forward and backward: tests/engine/test_source_moe.py). A CUDA estimate keeps the meta kernel's refusal, named: the
real CUDA kernel refuses those inputs too (experiments/estimate/unpredictable.py). From torch 2.15 both kernels take
fp32 and fp16 (meta_grouped_mm_takes_fp32), and a CUDA estimate predicts them.
"""

from __future__ import annotations

import contextlib
import functools

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_GROUPED_MM = torch.ops.aten._grouped_mm.default


def grouped_mm_size(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor | None) -> list[int]:
    """The output's size, by the meta kernel's rule (torch/_meta_registrations.py, _create_grouped_mm_output_tensor)."""
    if a.dim() == 2 and b.dim() == 2:
        return [offs.size(0), a.size(0), b.size(1)]
    if a.dim() == 2:
        return [a.size(0), b.size(-1)]
    if b.dim() == 2:
        return [a.size(1), b.size(1)]
    return [a.size(0), a.size(1), b.size(-1)]


class _CpuGroupedMm(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is _GROUPED_MM and args[0].dtype != torch.bfloat16 and args[0].device.type == "cpu":
            a, b = args[0], args[1]
            offs = args[2] if len(args) > 2 else kwargs.get("offs")
            bias = args[3] if len(args) > 3 else kwargs.get("bias")
            out_dtype = (args[4] if len(args) > 4 else kwargs.get("out_dtype")) or a.dtype
            if a.dtype == b.dtype and a.dtype in (torch.float32, torch.float16) and bias is None:
                return torch.empty(grouped_mm_size(a, b, offs), dtype=out_dtype, device=a.device)
        return func(*args, **kwargs)


@functools.cache
def meta_grouped_mm_takes_fp32() -> bool:
    """Whether this torch's fake kernel (and so its CUDA kernel, whose checks it copies) takes fp32 inputs."""
    a, b = torch.empty(8, 16, device="meta"), torch.empty(2, 16, 4, device="meta")
    try:
        _GROUPED_MM(a, b, offs=torch.tensor([3, 8], dtype=torch.int32, device="meta"))
    except RuntimeError:
        return False
    return True


@contextlib.contextmanager
def cpu_kernels(active: bool, disabled: set[str] = frozenset()):
    """The CPU's own answers for the fake kernels above, while `active` (a CPU estimate)."""
    if not active or "grouped_mm_cpu" in disabled:
        yield
        return
    with _CpuGroupedMm():
        yield
