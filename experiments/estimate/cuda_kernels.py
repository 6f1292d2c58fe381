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
kernel and autograd formula, so the saved tensors are that kernel's. The same without dropout where the CPU would take
the math path: a mask that needs its gradient (Swin's relative position bias, a learned parameter), which the CPU's
flash kernel does not take and CUDA's memory-efficient one does (a Swin-T step at batch 128 on an H100 held 1.8 GB less
than a replay that followed the CPU). Cases where the CPU and CUDA already save the same tensors (a fused kernel on
both) are left to the CPU's own choice, as are the ones this module does not claim to know (a head size that CUDA
pads).

The other way round: grouped-query attention (`enable_gqa`, fewer K/V heads than query heads, what transformers
passes for LLaMA-style models without a padding mask) in fp32, or 16-bit with a mask. The CPU's flash kernel takes
it; on CUDA, flash takes 16-bit inputs without a mask only and the memory-efficient kernel has no grouped-query
support (torch's sdp_utils.cpp: `check_batch_size_and_num_heads_dense<false>` in its constraints), so CUDA runs the
math path and keeps the B x H x L x L softmax for the backward. On the NVIDIA H200 a QLoRA step on Llama-3-8B
(prepare_model_for_kbit_training leaves the norms in fp32, so attention runs in fp32) held 17.5 GiB more than a replay
that let the CPU choose, 0.5 GiB per layer.

A mask whose last dimension is not contiguous (T5's relative position bias, a permuted embedding) sends CUDA to the math
path while the CPU keeps its fused kernel: on an NVIDIA H100, a T5 step at batch 16 x 512 held 3.6 GiB (36 %) more than
a replay that let the mask through.

The math path itself, as a plain CUDA run takes it. torch's composite adds the mask in place on plain tensors but out
of place on any tensor subclass (a fake tensor), so on fake tensors it holds a second B x H x L x L buffer for a moment
that the real run never has; `_math_as_cuda` is the same composite with the in-place add. Its softmax,
`aten._safe_softmax`, is one op to autograd and to the replay, but on CUDA it allocates an `eq` mask of its input and
the all-masked rows beside its output, and its backward (`_softmax_backward_data`) a product of the gradient and the
output the size of the gradient. `scratch_as_cuda` gives those buffers, as measured op by op on an NVIDIA H100
(benchmarks/op_memory.py): a checkpointed QLoRA step of Mistral-7B at batch 9 (fp32 attention; the recomputed layer's
softmax backward inside the backward holds the peak) peaked 4.9 GB above a replay without them.
"""

from __future__ import annotations

import contextlib
import functools
import math
import warnings

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import unset_fake_temporarily

from . import norm_scratch, reduce_scratch

aten = torch.ops.aten
_FLASH = int(torch.nn.attention.SDPBackend.FLASH_ATTENTION)
_HALF = (torch.float16, torch.bfloat16)


def cuda_backend(q, k, v, attn_mask, enable_gqa: bool = False) -> str | None:
    """The kernel CUDA (compute capability 8.0 and above) chooses for dense inputs: "flash", "efficient" or "math";
    None where this module does not know (a head size CUDA pads, another dtype, shapes the kernels refuse)."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return None
    grouped = k.size(-3) != q.size(-3)
    if grouped and not (enable_gqa and q.size(-3) % k.size(-3) == 0):
        return None
    head = q.size(-1)
    if head % 8 or v.size(-1) != head or q.dtype not in (*_HALF, torch.float32):
        return None
    if any(t is not None and t.dim() and t.stride(-1) != 1 for t in (q, k, v, attn_mask)):
        # torch's sdp_utils.cpp (check_last_dim_stride_equals_1_dense): every fused kernel wants the last dimension
        # at stride 1, the mask's too on CUDA but not on the CPU. T5's position bias, permuted from its embedding,
        # is such a mask in transformers before 5.2x: CUDA keeps the math path's B x H x L x L tensors.
        return "math"
    if q.dtype in _HALF and attn_mask is None and head <= 256:
        return "flash"
    return "math" if grouped else "efficient"


def _math(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa):
    """torch's math path as its composite runs it on either device, the boolean mask made additive first."""
    if attn_mask is not None and attn_mask.dtype is torch.bool:
        attn_mask = torch.where(attn_mask.logical_not(), float("-inf"), 0.0).to(q.dtype)
    return aten._scaled_dot_product_attention_math(
        q, k, v, attn_mask, dropout_p, is_causal, None, scale=scale, enable_gqa=enable_gqa
    )[0]


def _math_as_cuda(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa):
    """torch's math path (attention.cpp, `_scaled_dot_product_attention_math`) op for op, with the mask added in place
    as on plain CUDA tensors; with dropout, torch's own (not claimed: grouped-query attention with dropout)."""
    if dropout_p > 0.0:
        return _math(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    origin = q.dtype
    if q.dtype in _HALF:  # the math path computes in fp32
        q, k, v = q.to(torch.float32), k.to(torch.float32), v.to(torch.float32)
    s = scale if scale is not None else 1.0 / math.sqrt(q.size(-1))
    factor = math.sqrt(abs(s))
    query = aten.mul.Scalar(q, -factor if s < 0 else factor)
    if is_causal:
        attn_mask = torch.ones(query.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril()
    if attn_mask is not None and attn_mask.dtype is torch.bool:
        zero = torch.scalar_tensor(0.0, dtype=query.dtype, device=q.device)
        attn_mask = torch.where(attn_mask, zero, torch.scalar_tensor(float("-inf"), dtype=query.dtype, device=q.device))
    if enable_gqa and k.size(-3) != q.size(-3):
        k = k.repeat_interleave(q.size(-3) // k.size(-3), -3)
        v = v.repeat_interleave(q.size(-3) // v.size(-3), -3)
    attn = torch.matmul(query, aten.mul.Scalar(k.transpose(-2, -1), factor))
    if attn_mask is not None:
        attn.add_(attn_mask)
    attn = aten._safe_softmax(attn, -1)
    out = torch.matmul(attn, v).to(origin)
    attn.to(origin)  # the composite's second output (the weights in the input's dtype), dropped by the caller
    return out


def scratch_as_cuda(func, args, out, kwargs=None) -> tuple[int, ...]:
    """The buffers a CUDA kernel allocates beside its output, held together while it runs, as measured on the GPU
    (benchmarks/op_memory.py; docs/benchmarks/op-memory-h100/):
    - `_safe_softmax`: its `eq` mask of the input (1 byte per element), the all-masked rows and one 0-dim tensor;
    - `_softmax_backward_data`: the product grad * output, the size of the gradient (torch's SoftMax.cu computes it
      before the kernel);
    - `mse_loss`, `smooth_l1_loss` and `huber_loss` with a reduction: the elementwise loss, which ATen's Loss.cpp
      computes into a tensor of its own before the mean or sum (at the broadcast shape; huber_loss's at the input's,
      `empty_like(input)`), and that reduction's partial sums and semaphores. The first two keep their result in a
      storage of the broadcast shape too: the op's output, replay.fake_kernel_bytes;
    - attention's backward on 16-bit inputs: cuDNN's (what torch 2.11 runs on an H100 and an H200 for 16-bit inputs,
      with or without a mask, dropout or grouped heads) takes a workspace of B x H x S x D fp32 (the query gradient's
      accumulator) plus B x H x S fp32 and 256 bytes, measured on an H200 at six shapes in bf16 and fp16
      (docs/benchmarks/sdpa-probe-h200.txt), whichever fused kernel the replay called in its place;
    - a sum's partial sums across thread blocks and their semaphores (reduce_scratch.py), and layer norm's backward's
      partial sums for its weight and bias and their sum's (norm_scratch.py), where the device has not measured them
      (the replay takes a measured entry instead)."""
    if func is aten.native_layer_norm_backward.default:
        return _norm_scratch(args)
    if func in _ATTENTION_BACKWARDS and args[1].dtype in _HALF and args[1].dim() == 4:
        b, h, s, d = args[1].shape
        return (b * h * s * d * 4 + b * h * s * 4 + 256,)
    if not isinstance(out, torch.Tensor):
        return ()
    if func is aten.sum.dim_IntList:
        return _sum_scratch(args, out)
    if func in _REDUCED_LOSSES:
        return _loss_scratch(func, args, out, kwargs or {})
    if func is aten._safe_softmax.default:
        x, dim = args[0], args[1]
        return (x.numel(), x.numel() // max(1, x.size(dim)), out.element_size())
    if func is aten._softmax_backward_data.default:
        grad = args[0]
        return (grad.numel() * grad.element_size(),)
    return ()


def _sum_scratch(args, out) -> tuple[int, ...]:
    x = args[0]
    dims = args[1] if len(args) > 1 and args[1] is not None else []
    return reduce_scratch.buffers(
        x.shape, x.stride(), x.element_size(), list(dims), out.element_size(), x.dtype.is_floating_point
    )


_ATTENTION_BACKWARDS = (
    aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
    aten._scaled_dot_product_flash_attention_backward.default,
    aten._scaled_dot_product_efficient_attention_backward.default,
)
_REDUCED_LOSSES = (aten.mse_loss.default, aten.smooth_l1_loss.default, aten.huber_loss.default)
_MEAN = 1  # at::Reduction::Mean, the default


def _loss_scratch(func, args, out, kwargs) -> tuple[int, ...]:
    reduction = args[2] if len(args) > 2 else kwargs.get("reduction", _MEAN)
    if not reduction:  # "none": the loss is the output itself
        return ()
    huber = func is aten.huber_loss.default
    shape = tuple(args[0].shape if huber else torch.broadcast_shapes(args[0].shape, args[1].shape))
    strides = tuple(math.prod(shape[i + 1 :]) for i in range(len(shape)))
    n = out.element_size()
    kernel = reduce_scratch.mean_scratch if reduction == _MEAN else reduce_scratch.sum_scratch
    return (math.prod(shape) * n, *reduce_scratch.buffers(shape, strides, n, [], n, True, kernel=kernel))


def _norm_scratch(args) -> tuple[int, ...]:
    _grad, x, normalized, _mean, _rstd, weight, bias, mask = args[:8]
    wanted = weight is not None and mask[1], bias is not None and mask[2]
    itemsize = (weight if weight is not None else bias if bias is not None else x).element_size()
    return norm_scratch.buffers(tuple(x.shape), len(normalized), itemsize, *wanted)


MEM_EFF_ALIGNMENT = 8  # torch's attention.cpp, preprocess_mask (16 in releases before 2.5)


def _bias(attn_mask, dtype):
    """The additive bias CUDA's memory-efficient kernel takes: a boolean mask becomes 0 / -inf in the query's dtype,
    and a mask whose strides are not multiples of 8 (its last dimension's size among them) is padded to a multiple of
    8 and viewed back, before it is expanded, as torch's `preprocess_mask` does (`aligned_tensor`, `pad_bias`). On an
    NVIDIA H200 a Swin-T step at batch 16 padded its [1024, 3, 49, 49] bf16 mask to 56 columns (16,859,136 bytes,
    docs/benchmarks/trial-history-h200/swin-16.json.gz)."""
    if attn_mask is None:
        return None
    if attn_mask.dtype is torch.bool:
        attn_mask = torch.where(attn_mask.logical_not(), float("-inf"), 0.0).to(dtype)
    aligned = attn_mask.stride(-1) == 1 and all(s % MEM_EFF_ALIGNMENT == 0 for s in attn_mask.stride()[:-1])
    if not aligned:
        last = attn_mask.size(-1)
        attn_mask = F.pad(attn_mask, (0, MEM_EFF_ALIGNMENT - last % MEM_EFF_ALIGNMENT))[..., :last]
    return attn_mask


def sdpa_as_cuda(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa, cpu_choice):
    """scaled_dot_product_attention through the kernel CUDA would choose, or None where the CPU's is the same.
    `cpu_choice()`: the CPU's backend for these inputs (asked once per call, _sdpa)."""
    backend = cuda_backend(q, k, v, attn_mask, enable_gqa)
    if backend == "math":
        return _math_as_cuda(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    if k.size(-3) != q.size(-3):
        return None  # grouped-query attention in a fused kernel: not claimed
    if dropout_p <= 0.0 and cpu_choice() == _FLASH:
        return None  # a fused kernel on both devices saves the same tensors
    # The CPU would take the math path: with dropout, or a mask that needs its gradient (Swin's relative position
    # bias, a learned parameter: the CPU's flash kernel takes no gradient for a mask, CUDA's memory-efficient one does).
    if backend == "flash":
        return aten._scaled_dot_product_flash_attention(q, k, v, dropout_p, is_causal, False, scale=scale)[0]
    if backend == "efficient":
        grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
        bias = _bias(attn_mask, q.dtype)
        return aten._scaled_dot_product_efficient_attention(q, k, v, bias, grad, dropout_p, is_causal, scale=scale)[0]
    return None


def dropout_as_cuda(x, p: float, train: bool):
    """aten::dropout as CUDA's composite runs it: the fused native_dropout where CUDA takes it, else what the
    composite does for both devices (the input itself, or a product with zero)."""
    if not train or p == 0.0 or x.numel() == 0:
        return x
    if p == 1.0:
        return x.mul(torch.zeros((), dtype=x.dtype))
    return torch.native_dropout(x, p, True)[0]


def _probe(t):
    """A real tensor with t's shape, dtype, last-dim stride and requires_grad, over one row of memory."""
    if t is None:
        return None
    base = torch.empty(t.shape[-1] if t.dim() else 1, dtype=t.dtype).requires_grad_(
        t.requires_grad and t.is_floating_point()
    )
    return base.as_strided(t.shape, [0] * (t.dim() - 1) + [t.stride(-1)] if t.dim() else [])


def _cpu_choice(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa) -> int:
    """The backend the CPU's scaled_dot_product_attention chooses for these inputs (an SDPBackend's value)."""
    with unset_fake_temporarily():  # a fake tensor's choice is the meta device's (math); the CPU's is wanted
        probes = [_probe(t) for t in (q, k, v, attn_mask)]
        return torch._fused_sdp_choice(*probes, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)


def _cpu_sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa, cpu_choice):
    """The CPU's own scaled_dot_product_attention (its composite): the backend the CPU chooses, the boolean mask
    turned into an additive one in the query's dtype, then that backend's kernel."""
    if cpu_choice() != _FLASH:
        return _math(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    if attn_mask is not None and attn_mask.dtype is torch.bool:
        attn_mask = torch.where(attn_mask.logical_not(), float("-inf"), 0.0).to(q.dtype)
    return aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, dropout_p, is_causal, attn_mask=attn_mask, scale=scale
    )[0]


def _sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None, enable_gqa=False):
    args = (q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    cpu_choice = functools.cache(functools.partial(_cpu_choice, *args))
    out = sdpa_as_cuda(*args, cpu_choice)
    return _cpu_sdpa(*args, cpu_choice) if out is None else out


# CUDA runs these through cuDNN (aten._cudnn_rnn), which keeps a reserve space for backward and a re-flattened copy of
# the weights whose sizes cuDNN decides: no shape rule here gives them, so a CUDA estimate names the op instead.
RNNS = (
    "lstm.input",
    "lstm.data",
    "gru.input",
    "gru.data",
    "rnn_tanh.input",
    "rnn_tanh.data",
    "rnn_relu.input",
    "rnn_relu.data",
)


def _cudnn_rnn(name: str):
    def kernel(*args, **kwargs):
        from .unpredictable import NotPredicted

        raise NotPredicted(f"aten.{name} (cuDNN on CUDA)", "cuDNN's reserve space and weight buffer are not sized")

    return kernel


@contextlib.contextmanager
def cuda_kernels(active: bool):
    """Dropout and attention as CUDA runs them while `active` (a replay that estimates a CUDA run on fake CPU
    tensors). Registered with the dispatcher, not as a Python mode: a checkpointed block recomputes its forward
    inside the backward, where Python modes are not on the stack. Yields True when active, else None."""
    if not active:
        yield None
        return
    lib = torch.library.Library("aten", "IMPL")  # noqa: TOR901 - scoped: destroyed below
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="(?s).*Overriding a previously registered kernel")
            lib.impl("dropout", dropout_as_cuda, "CompositeImplicitAutograd")
            lib.impl("scaled_dot_product_attention", _sdpa, "CompositeImplicitAutograd")
            for name in RNNS:
                lib.impl(name, _cudnn_rnn(name), "CompositeImplicitAutograd")
        yield True
    finally:
        lib._destroy()
