"""A CPU replay of a CUDA run casts and picks kernels as CUDA does (experiments/estimate/cuda_autocast.py,
cuda_kernels.py); outside the replay the CPU's own behaviour is untouched."""

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import checkpoint

from experiments.estimate.cuda_autocast import POLICIES, REGISTERED, cuda_autocast
from experiments.estimate.cuda_kernels import cuda_kernels


def test_every_op_cuda_autocasts_in_this_torch_has_a_policy():
    """A torch that registers a new op for CUDA's autocast fails here instead of being estimated with the CPU's."""
    assert REGISTERED, "no AutocastCUDA registrations found"
    assert not sorted(REGISTERED - set(POLICIES))


def _dtypes():
    x = torch.randn(4, 8)
    w = torch.randn(8, 8, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ w
        return {
            "mm": y.dtype,
            "pow": torch.pow(y, 3.0).dtype,
            "exp": y.exp().dtype,
            "rsqrt": y.abs().rsqrt().dtype,
            "sum": y.sum().dtype,
            "softmax": torch.softmax(y, -1).dtype,
            "layer_norm": F.layer_norm(y, (8,)).dtype,
            "cross_entropy": F.cross_entropy(y, torch.zeros(4, dtype=torch.long)).dtype,
            "mul": (y * y).dtype,
        }


def test_cuda_policies_apply_inside_and_the_cpu_ones_outside():
    bf16, fp32 = torch.bfloat16, torch.float32
    cpu = {"mm": bf16, "pow": bf16, "exp": bf16, "rsqrt": bf16, "sum": bf16, "softmax": bf16, "layer_norm": bf16}
    cuda = {"mm": bf16, "pow": fp32, "exp": fp32, "rsqrt": fp32, "sum": fp32, "softmax": fp32, "layer_norm": fp32}
    before = _dtypes()
    with cuda_autocast(True) as taken:
        inside = _dtypes()
    after = _dtypes()
    assert "pow.Tensor_Scalar" in taken and "cross_entropy_loss" in taken
    assert {k: before[k] for k in cpu} == cpu and {k: inside[k] for k in cuda} == cuda
    assert after == before
    assert inside["cross_entropy"] == before["cross_entropy"] == fp32 and inside["mul"] == bf16


class _Copies(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.copies = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._to_copy.default:
            self.copies += 1
        return func(*args, **(kwargs or {}))


def _weight_casts() -> int:
    x = torch.randn(4, 8, dtype=torch.bfloat16)
    w = torch.randn(8, 8, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16), _Copies() as mode:
        F.linear(x, w)
        F.linear(x, w)
    return mode.copies


def test_the_matmul_casts_of_a_parameter_stay_cached():
    """autocast casts an fp32 parameter once per region (the "autocast copies" of the breakdown); the CUDA policies
    leave the CPU's matmul kernels, and so that cache, in place."""
    plain = _weight_casts()
    with cuda_autocast(True):
        assert _weight_casts() == plain == 1


def _saved(fn) -> list[tuple[torch.dtype, int]]:
    saved = []

    def pack(t):
        saved.append((t.dtype, t.numel()))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return saved


def test_dropout_keeps_a_boolean_mask_as_cuda_does():
    x = torch.randn(64, 256, dtype=torch.bfloat16, requires_grad=True)
    cpu = _saved(lambda: F.dropout(x, 0.1, training=True))
    with cuda_kernels(True):
        cuda = _saved(lambda: F.dropout(x, 0.1, training=True))
        assert F.dropout(x, 0.1, training=False) is x  # evaluation: nothing to fuse
    assert (torch.bfloat16, x.numel()) in cpu and (torch.bool, x.numel()) in cuda
    assert all(d is not torch.bfloat16 for d, _ in cuda)


def test_attention_with_dropout_saves_no_score_matrix_as_cuda_does():
    """On fake tensors, as in a replay (CUDA's kernels have no CPU implementation, only their shapes)."""
    b, h, seq, d = 2, 4, 128, 64
    fake = FakeTensorMode()
    with fake:
        q, k, v = (torch.randn(b, h, seq, d, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))

    def attend():
        F.scaled_dot_product_attention(q, k, v, dropout_p=0.1, is_causal=True)

    with fake:
        cpu = _saved(attend)
        with cuda_kernels(True):
            cuda = _saved(attend)
    scores = b * h * seq * seq
    assert any(n == scores for _, n in cpu)  # the CPU's math path keeps the scores
    assert max(n for _, n in cuda) == b * h * seq * d


@pytest.mark.parametrize(
    "case",
    [
        dict(is_causal=True),
        dict(),
        dict(mask="bool"),
        dict(mask="float"),
        dict(dtype=torch.float32, is_causal=True),
        dict(kv_heads=2, enable_gqa=True, is_causal=True),
        dict(kv_heads=2, enable_gqa=True, dropout_p=0.1),
    ],
)
def test_where_cuda_saves_what_the_cpu_saves_the_cpus_own_attention_runs(case):
    """Without a reason to differ, the replacement runs the CPU's own choice: the same saved tensors as the genuine
    F.scaled_dot_product_attention, also inside a checkpointed block's recomputation (the dispatcher, not a mode)."""
    case = dict(case)
    dtype, kv, mask = case.pop("dtype", torch.bfloat16), case.pop("kv_heads", 4), case.pop("mask", None)
    fake = FakeTensorMode()
    with fake:
        q = torch.randn(2, 4, 32, 16, dtype=dtype, requires_grad=True)
        k, v = (torch.randn(2, kv, 32, 16, dtype=dtype, requires_grad=True) for _ in range(2))
        m = {"bool": torch.ones(32, 32, dtype=torch.bool).tril(), "float": torch.zeros(32, 32, dtype=dtype)}.get(mask)

        def attend():
            return F.scaled_dot_product_attention(q, k, v, attn_mask=m, **case)

        plain = [(dt, n) for dt, n in _saved(attend)]
        with cuda_kernels(True):
            ours = _saved(attend)
            checkpoint(attend, use_reentrant=False).float().sum().backward()
    if case.get("dropout_p"):
        # Grouped-query attention with dropout is left to the CPU's math path, whose dropout is then CUDA's (a mask)
        assert any(dt is torch.bool for dt, _ in ours) and not any(dt is torch.bool for dt, _ in plain)
        return
    assert sorted(ours, key=str) == sorted(plain, key=str)


def test_inactive_changes_nothing():
    with cuda_autocast(False) as a, cuda_kernels(False) as k:
        assert a is None and k is None
        assert _dtypes()["pow"] is torch.bfloat16
