"""Kernels CUDA chooses where the CPU chooses others, in a replay on fake CPU tensors that estimates a CUDA run.

Dropout. `F.dropout` on a CUDA tensor runs the fused `native_dropout`, which keeps a boolean mask (1 byte per element)
for the backward; on a CPU tensor it draws a noise tensor in the input's dtype and keeps that (2 bytes in bf16, 4 in
fp32). Under `cuda_kernels()` a training-mode dropout that CUDA would fuse calls `native_dropout`, as CUDA does.

Attention. `F.scaled_dot_product_attention` picks its kernel by device. With attention dropout (GPT-2 and BERT train with 0.1)
the CPU's fused kernel refuses the inputs and the CPU takes the math path, which materialises the B x H x L x L
scores, their softmax and the dropout mask and keeps them for the backward: 12 GB more than the real run for GPT-2
small at batch 8 x 1024. CUDA keeps its fused kernels for dropout: flash attention for 16-bit inputs without a mask,
memory-efficient attention for fp32 or with a mask; each saves the output, a log-sum-exp row and the RNG state, not
the scores. Under `cuda_kernels()` the replay calls the kernel CUDA would choose, through its own fake (meta)
kernel and autograd formula, so the saved tensors are that kernel's. Cases where the CPU and CUDA already save the
same tensors (no dropout) are left to the CPU's own choice, as are the ones this module does not claim to know
(grouped-query attention with dropout, a head size that CUDA pads).
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

aten = torch.ops.aten
_SDPA = (F.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention)
_DROPOUT = (F.dropout, torch.dropout)
_HALF = (torch.float16, torch.bfloat16)


def cuda_backend(q, k, v, attn_mask, dropout_p: float) -> str | None:
    """ "flash" or "efficient" where CUDA keeps a fused kernel that the CPU gives up; None where the CPU's own
    choice saves what CUDA saves (or this module does not know)."""
    if dropout_p <= 0.0 or q.dim() != 4 or k.size(-3) != q.size(-3):
        return None
    head = q.size(-1)
    if head % 8 or v.size(-1) != head:
        return None
    if q.dtype in _HALF and attn_mask is None and head <= 256:
        return "flash"
    return "efficient" if q.dtype in (*_HALF, torch.float32) else None


def _bias(attn_mask, dtype):
    """The additive bias CUDA's memory-efficient kernel takes: a boolean mask becomes 0 / -inf in the query's dtype,
    and a last dimension that is not a multiple of 16 is padded (and viewed back), as torch's CUDA wrapper does."""
    if attn_mask is None:
        return None
    if attn_mask.dtype is torch.bool:
        attn_mask = torch.where(attn_mask.logical_not(), float("-inf"), 0.0).to(dtype)
    last = attn_mask.size(-1)
    if last % 16:
        attn_mask = F.pad(attn_mask, (0, 16 - last % 16))[..., :last]
    return attn_mask


def _cast(q, k, v):
    # autocast casts fp32 inputs of scaled_dot_product_attention to its dtype; the aten kernels are not on its lists
    if torch.is_autocast_enabled("cpu"):
        dtype = torch.get_autocast_dtype("cpu")
        q, k, v = (t.to(dtype) if t.dtype is torch.float32 else t for t in (q, k, v))
    return q, k, v


def sdpa_as_cuda(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """F.scaled_dot_product_attention through the kernel CUDA would choose, or None where the CPU's is the same."""
    q, k, v = _cast(q, k, v)
    backend = cuda_backend(q, k, v, attn_mask, dropout_p)
    if backend == "flash":
        return aten._scaled_dot_product_flash_attention(q, k, v, dropout_p, is_causal, False, scale=scale)[0]
    if backend == "efficient":
        grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
        bias = _bias(attn_mask, q.dtype)
        return aten._scaled_dot_product_efficient_attention(q, k, v, bias, grad, dropout_p, is_causal, scale=scale)[0]
    return None


def dropout_as_cuda(x, p=0.5, training=True, inplace=False):
    """A dropout CUDA fuses (training, 0 < p < 1, not in place, not empty) through `native_dropout`; else None."""
    if not training or inplace or not 0.0 < p < 1.0 or x.numel() == 0:
        return None
    return torch.native_dropout(x, p, True)[0]


def _dropout_args(func, args, kwargs):
    if func is torch.dropout:  # torch.dropout(input, p, train)
        names = ("x", "p", "training")
    else:
        names = ("x", "p", "training", "inplace")
    bound = dict(zip(names, args, strict=False))
    bound.update({("x" if k == "input" else "training" if k == "train" else k): v for k, v in kwargs.items()})
    return bound


class _CudaKernels(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.calls: dict[str, int] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out, kind = None, None
        if func in _SDPA:
            out, kind = sdpa_as_cuda(*args, **kwargs), "scaled_dot_product_attention"
        elif func in _DROPOUT:
            out, kind = dropout_as_cuda(**_dropout_args(func, args, kwargs)), "dropout"
        if out is None:
            return func(*args, **kwargs)
        self.calls[kind] = self.calls.get(kind, 0) + 1
        return out


@contextlib.contextmanager
def cuda_kernels(active: bool):
    """Dropout and attention as CUDA runs them while `active` (a replay that estimates a CUDA run on fake CPU
    tensors); yields the calls taken over, by kind (None when inactive)."""
    if not active:
        yield None
        return
    mode = _CudaKernels()
    with mode:
        yield mode.calls
