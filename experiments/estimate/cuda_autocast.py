"""CUDA's autocast, in a replay on fake CPU tensors that estimates a CUDA run.

A replay for a CUDA run dispatches as the CPU does (a CPU build of torch cannot make CUDA tensors), so under AMP it
follows autocast's CPU op lists. CUDA's lists differ, and the dtype of what autograd saves differs with them: CUDA
runs `pow`, `exp`, `rsqrt`, `layer_norm`, `softmax`, `sum` ... in fp32, the CPU in the input's dtype. GPT-2's GELU
(`0.5 * x * (1 + tanh(c * (x + 0.044715 * pow(x, 3))))`) therefore saves fp32 tensors on CUDA and bf16 ones on the
CPU: 1.5 GiB of a 12.6 GiB peak at batch 8 x 1024. Under `cuda_autocast()` the CPU's autocast kernels give way to
CUDA's policies, op by op, for the duration of the replay:

- `POLICIES` is CUDA's table (torch's aten/src/ATen/autocast_mode.h): which ops run in the low dtype, which in fp32,
  which get an fp32 output dtype, which run in the widest input dtype, and the one CUDA refuses.
- An op with an autocast kernel for the CPU but none for CUDA (`cross_entropy_loss`, `cat`, ...) is passed through,
  as CUDA's dispatcher does.
- The ops CUDA registers are read from the installed torch (`REGISTERED`). One the table does not name (a newer torch
  adds ops: 2.15 added `linalg_matrix_sqrth`) is not guessed: a replay that calls it under autocast stops with
  `UnknownAutocastPolicy`, which the estimate reports as "cannot be predicted", naming the op. A CUDA build also
  registers `_cudnn_rnn` (cuDNN's RNN, which casts and re-flattens its weights), which a CPU replay never reaches.

Casts to the low dtype are not cached here (CUDA caches those of fp32 leaf parameters for the autocast region): of the
ops this module takes over, only the rarely used einsum/mv/addmv/addr/chain_matmul/multi_dot/RNN cells cast in that
direction. The kernels are registered for one replay and removed after it; replays and runs take turns (fp32_math.LOCK).
"""

from __future__ import annotations

import contextlib
import warnings

import torch

_LOW = (
    "_convolution _convolution.deprecated conv1d conv2d conv3d conv_tbc conv_transpose1d conv_transpose2d.input "
    "conv_transpose3d.input convolution prelu addmm addmv addr matmul einsum mm mv linalg_vecdot linear addbmm baddbmm "
    "bmm chain_matmul linalg_multi_dot _thnn_fused_lstm_cell _thnn_fused_gru_cell lstm_cell gru_cell rnn_tanh_cell "
    "rnn_relu_cell _scaled_dot_product_flash_attention scaled_dot_product_attention cudnn_convolution "
    "cudnn_convolution_transpose"
)
_FP32 = (
    "acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan pow.Tensor_Scalar pow.Tensor_Tensor "
    "pow.Scalar softplus layer_norm native_layer_norm group_norm rms_norm frobenius_norm.dim nuclear_norm "
    "nuclear_norm.dim cosine_similarity poisson_nll_loss cosine_embedding_loss nll_loss nll_loss2d hinge_embedding_loss "
    "kl_div l1_loss smooth_l1_loss huber_loss mse_loss margin_ranking_loss multilabel_margin_loss soft_margin_loss "
    "triplet_margin_loss multi_margin_loss binary_cross_entropy_with_logits dist pdist cdist renorm logsumexp "
    "upsample_nearest1d _upsample_nearest_exact1d upsample_nearest2d _upsample_nearest_exact2d upsample_nearest3d "
    "_upsample_nearest_exact3d upsample_linear1d upsample_bilinear2d _upsample_bilinear2d_aa upsample_trilinear3d "
    "upsample_bicubic2d _upsample_bicubic2d_aa linalg_matrix_sqrth"
)
_FP32_OUT = (
    "prod prod.dim_int prod.dim_Dimname softmax.int softmax.Dimname log_softmax.int log_softmax.Dimname cumprod "
    "cumprod.dimname cumsum cumsum.dimname linalg_vector_norm linalg_matrix_norm linalg_matrix_norm.str_ord sum "
    "sum.dim_IntList sum.dim_DimnameList"
)
_APPEND = {
    "norm.Scalar": "ScalarOpt_dtype",
    "norm.ScalarOpt_dim": "ScalarOpt_dim_dtype",
    "norm.names_ScalarOpt_dim": "",
}
_PROMOTE = "addcdiv addcmul atan2 bilinear cross dot vdot grid_sampler index_put tensordot scatter_add"
_BANNED = "binary_cross_entropy"

POLICIES: dict[str, str] = {
    **dict.fromkeys(_LOW.split(), "low"),
    **dict.fromkeys(_FP32.split(), "fp32"),
    **dict.fromkeys(_FP32_OUT.split(), "fp32_out"),
    **dict.fromkeys(_APPEND, "fp32_append"),
    **dict.fromkeys(_PROMOTE.split(), "promote"),
    _BANNED: "banned",
}
_KEY = torch._C.DispatchKey.AutocastCPU


class UnknownAutocastPolicy(NotImplementedError):
    """An op that CUDA's autocast registers in this torch and whose policy the table above does not know."""

    def __init__(self, op: str):
        super().__init__(f"aten.{op}: CUDA's autocast policy for it (torch {torch.__version__}) is not known here")
        self.op = f"aten.{op}"


def _names(key: str) -> set[str]:
    return {n.removeprefix("aten::") for n in torch._C._dispatch_get_registrations_for_dispatch_key(key)}


REGISTERED = _names("AutocastCUDA")
_CPU = _names("AutocastCPU")
# Ops with an autocast kernel on both devices whose policies differ (the CPU runs these three in fp32); the others
# registered on both (matmuls and convolutions in the low dtype, losses in fp32) keep the CPU's kernel and its cast cache.
DIFFER = {"prod", "prod.dim_int", "prod.dim_Dimname", "grid_sampler", "binary_cross_entropy"}


def _op(name: str):
    base, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, base), overload or "default")


def _eligible(t) -> bool:
    return isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype is not torch.float64


def _cast(x, dtype):
    if isinstance(x, (list, tuple)):
        return type(x)(_cast(t, dtype) for t in x)
    return x.to(dtype) if _eligible(x) and x.dtype is not dtype else x


def _tensors(args):
    for a in args:
        if isinstance(a, (list, tuple)):
            yield from (t for t in a if isinstance(t, torch.Tensor))
        elif isinstance(a, torch.Tensor):
            yield a


def _kernel(name: str, policy: str):
    op = _op(name)
    dtype_at = next((i for i, a in enumerate(op._schema.arguments) if a.name == "dtype"), None)
    appended = _op(f"norm.{_APPEND[name]}") if policy == "fp32_append" and _APPEND[name] else None

    def kernel(*args, **kwargs):
        low = torch.get_autocast_dtype("cpu")
        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(_KEY)):
            if policy == "banned":
                raise RuntimeError(
                    f"torch.nn.functional.{name} is unsafe to autocast on CUDA; use binary_cross_entropy_with_logits"
                )
            if policy in ("low", "fp32", "promote"):
                if policy == "promote":
                    low = torch.float32 if any(t.dtype is torch.float32 for t in _tensors(args)) else low
                dtype = low if policy != "fp32" else torch.float32
                return op(*_cast(args, dtype), **{k: _cast(v, dtype) for k, v in kwargs.items()})
            if not (args and _eligible(args[0])):
                return op(*args, **kwargs)
            if policy == "fp32_out":
                if dtype_at is not None and dtype_at < len(args):
                    args = (*args[:dtype_at], args[dtype_at] or torch.float32, *args[dtype_at + 1 :])
                else:
                    kwargs = {**kwargs, "dtype": kwargs.get("dtype") or torch.float32}
                return op(*args, **kwargs)
            return appended(*args, dtype=torch.float32, **kwargs) if appended is not None else op(*args, **kwargs)

    return kernel


def _unknown(name: str):
    def kernel(*args, **kwargs):
        raise UnknownAutocastPolicy(name)

    return kernel


def _passthrough(name: str):
    """CUDA has no autocast kernel for this op: a composite op runs its decomposition with autocast still on (its parts
    meet CUDA's policies), any other op runs as it is."""
    op = _op(name)
    composite = torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd")

    def kernel(*args, **kwargs):
        if composite:
            return op.decompose(*args, **kwargs)
        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(_KEY)):
            return op(*args, **kwargs)

    return kernel


@contextlib.contextmanager
def cuda_autocast(active: bool):
    """CUDA's autocast policies for the CPU's autocast while `active`; yields the op names taken over (None when
    inactive), those without a known policy included (they refuse). Nothing changes outside an autocast region."""
    if not active:
        yield None
        return
    lib = torch.library.Library("aten", "IMPL")  # noqa: TOR901 - scoped: destroyed below
    taken: list[str] = []
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="(?s).*Overriding a previously registered kernel")
            for name in sorted(REGISTERED):
                if name not in POLICIES:
                    lib.impl(name, _unknown(name), "AutocastCPU")
                    taken.append(name)
                elif name not in _CPU or name in DIFFER:
                    lib.impl(name, _kernel(name, POLICIES[name]), "AutocastCPU")
                    taken.append(name)
            for name in sorted(_CPU - REGISTERED):
                lib.impl(name, _passthrough(name), "AutocastCPU")
                taken.append(name)
        yield taken
    finally:
        lib._destroy()
