"""A CPU replay of a CUDA run casts and picks kernels as CUDA does (experiments/estimate/cuda_autocast.py,
cuda_kernels.py); outside the replay the CPU's own behaviour is untouched."""

import pytest
import torch

from experiments.estimate.cuda_autocast import POLICIES, REGISTERED, cuda_autocast


def test_every_op_cuda_autocasts_in_this_torch_has_a_policy_or_refuses():
    """Every op CUDA's autocast registers in the installed torch is taken over: by its policy, or (one added by a
    newer torch) by a kernel that refuses it by name, never left to the CPU's policy."""
    assert REGISTERED, "no AutocastCUDA registrations found"
    with cuda_autocast(True) as taken:
        pass
    assert not sorted((REGISTERED - set(POLICIES)) - set(taken))


def test_an_op_without_a_known_cuda_policy_is_named_not_guessed(monkeypatch):
    """As a torch newer than the table would: `exp` and `layer_norm` (fp32 on CUDA, no CPU autocast kernel) lose their
    policies. Outside an autocast region nothing changes; inside it the CUDA estimate cannot be made and names the op,
    for a built-in model as for one's own."""
    from experiments.core.config import ExperimentConfig
    from experiments.estimate import cuda_autocast as module
    from experiments.estimate.replay import replay
    from experiments.estimate.unpredictable import CannotPredict

    monkeypatch.delitem(module.POLICIES, "exp")
    monkeypatch.delitem(module.POLICIES, "layer_norm")
    with cuda_autocast(True):
        assert torch.randn(3).exp().dtype is torch.float32
        with torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(module.UnknownAutocastPolicy, match="aten.exp"):
            torch.randn(3, dtype=torch.bfloat16).exp()
    cfg = ExperimentConfig(model="transformer", layers=1, width=64, batch=2, seq_len=16, heads=2, precision="amp_bf16")
    with pytest.raises(CannotPredict) as e:
        replay(cfg, block=512)
    assert e.value.info["op"] == "aten.layer_norm" and "autocast policy" in e.value.info["message"]
    assert (e.value.info["phase"], e.value.info["step"]) == ("forward", 1)
    assert replay(cfg)["peak_bytes"] > 0  # the CPU's own estimate does not use CUDA's table


def _saved_by_attention(active: bool, dtype, kv_heads: int, length: int = 48) -> list[tuple]:
    """The shapes scaled_dot_product_attention keeps for its backward, on fake CPU tensors, with the replay's CUDA
    kernels on or off."""
    import torch.nn.functional as F
    from torch._subclasses.fake_tensor import FakeTensorMode

    from experiments.estimate.cuda_kernels import cuda_kernels

    saved = []

    def pack(t):
        saved.append((tuple(t.shape), t.dtype))
        return t

    with FakeTensorMode(), cuda_kernels(active), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        q = torch.randn(1, 8, length, 64, dtype=dtype, requires_grad=True)
        k = torch.randn(1, kv_heads, length, 64, dtype=dtype, requires_grad=True)
        v = torch.randn(1, kv_heads, length, 64, dtype=dtype, requires_grad=True)
        F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=kv_heads != 8)
    return saved


def test_grouped_query_attention_in_fp32_keeps_the_scores_on_cuda_only():
    """CUDA's flash kernel takes 16-bit inputs only and its memory-efficient kernel has no grouped-query support, so
    fp32 grouped-query attention runs the math path there and keeps the 1 x 8 x L x L softmax (0.5 GiB per layer for
    Llama-3-8B at seq 2048: the H200 QLoRA miss); the CPU's flash kernel takes it and keeps no L x L tensor."""
    scores = ((1, 8, 48, 48), torch.float32)  # L = 48, head size 64
    assert scores in _saved_by_attention(True, torch.float32, kv_heads=2)
    assert scores not in _saved_by_attention(False, torch.float32, kv_heads=2)
    # Where CUDA keeps a fused kernel, no L x L tensor either way: 16-bit grouped (flash), fp32 with equal heads
    # (memory-efficient).
    for dtype, kv_heads in ((torch.bfloat16, 2), (torch.float32, 8)):
        for active in (True, False):
            assert not [s for s, _ in _saved_by_attention(active, dtype, kv_heads) if s[-2:] == (48, 48)]


def test_a_mask_not_contiguous_in_its_last_dimension_sends_cuda_to_the_math_path():
    """sdp_utils.cpp checks the mask's last stride on CUDA only: T5's position bias (a permuted embedding, passed as
    it is by transformers before 5.2x) made an H100 run keep 3.6 GiB of scores that a fused kernel does not."""
    from experiments.estimate.cuda_kernels import cuda_backend

    q, k, v = (torch.randn(2, 32, 4, 64).transpose(1, 2) for _ in range(3))  # a projection's view: last stride 1
    bias = torch.randn(32, 32, 4).permute(2, 0, 1).unsqueeze(0)  # (1, heads, L, L), last stride 4
    assert bias.stride(-1) != 1
    assert cuda_backend(q, k, v, bias) == "math"
    assert cuda_backend(q, k, v, bias.contiguous()) == "efficient"
    assert cuda_backend(q.half(), k.half(), v.half(), None) == "flash"


def _saved_with_a_learned_bias(active: bool) -> list[tuple]:
    """What attention with a mask that needs its gradient (Swin's relative position bias) keeps for its backward, on
    fake CPU tensors, with the replay's CUDA kernels on or off. Window attention: 49 tokens, head size 32."""
    import torch.nn.functional as F
    from torch._subclasses.fake_tensor import FakeTensorMode

    from experiments.estimate.cuda_kernels import cuda_kernels

    saved = []

    def pack(t):
        saved.append((tuple(t.shape), t.dtype))
        return t

    with FakeTensorMode(), cuda_kernels(active), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        q, k, v = (torch.randn(64, 3, 49, 32, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        bias = torch.randn(1, 3, 49, 49, dtype=torch.bfloat16, requires_grad=True)
        F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    return saved


def test_a_learned_bias_keeps_cudas_memory_efficient_kernel_not_the_cpus_math_path():
    """The CPU's flash kernel takes no gradient for a mask, so the CPU keeps the math path's 64 x 3 x 49 x 49 scores for
    a learned bias; CUDA's memory-efficient kernel takes it and keeps none (a Swin-T step at batch 128 on an H100 held
    1.8 GB less than the replay that followed the CPU). CUDA pads the mask to a multiple of 8 columns (49 to 56: an
    H200's allocation history) and keeps that padded mask for its backward."""
    cpu = _saved_with_a_learned_bias(False)
    cuda = _saved_with_a_learned_bias(True)
    assert ((64, 3, 49, 49), torch.float32) in cpu  # the CPU's math path: the scores, in fp32
    assert not [s for s, _ in cuda if s[-2:] == (49, 49) and s[0] == 64]
    # the memory-efficient kernel's: the mask (a view of its padded copy), the output and a log-sum-exp row per query
    assert ((1, 3, 49, 49), torch.bfloat16) in cuda and ((64, 3, 64), torch.float32) in cuda


def test_the_efficient_kernels_mask_is_padded_to_eight_columns_where_it_is_not_aligned():
    from experiments.estimate.cuda_kernels import MEM_EFF_ALIGNMENT, _bias

    assert MEM_EFF_ALIGNMENT == 8
    padded = _bias(torch.zeros(1, 3, 49, 49), torch.float32)
    assert padded.shape == (1, 3, 49, 49) and padded.untyped_storage().nbytes() == 1 * 3 * 49 * 56 * 4
    aligned = torch.zeros(2, 1, 64, 64)
    assert _bias(aligned, torch.float32) is aligned  # strides all multiples of 8: used as it is
    assert _bias(torch.zeros(2, 1, 8, 8).expand(2, 4, 8, 8), torch.float32).untyped_storage().nbytes() == 2 * 8 * 8 * 4


def _attention_ops(run) -> tuple[list[str], list]:
    """The ops `run(q, k, v)` dispatches on plain CPU tensors (forward and backward), and its output and gradients."""
    ops = []

    class Log(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            ops.append(func.name().removeprefix("aten::"))
            return func(*args, **(kwargs or {}))

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, h, 48, 64, requires_grad=True) for h in (8, 2, 2))
    with Log():
        out = run(q, k, v)
        out.pow(2).sum().backward()
    return ops, [out.detach(), q.grad, k.grad, v.grad]


def test_the_math_path_as_cuda_runs_it_adds_the_mask_in_place_and_nothing_else_changes():
    """torch's composite adds the mask out of place on a tensor subclass (every fake tensor, or under any dispatch
    mode) and in place on plain CUDA tensors: the replay takes the plain branch, op for op otherwise the same."""
    from experiments.estimate.cuda_kernels import _math_as_cuda

    aten = torch.ops.aten
    theirs, expected = _attention_ops(
        lambda q, k, v: aten._scaled_dot_product_attention_math(q, k, v, None, 0.0, True, None, enable_gqa=True)[0]
    )
    ours, got = _attention_ops(lambda q, k, v: _math_as_cuda(q, k, v, None, 0.0, True, None, True))
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b)
    assert "add.Tensor" in theirs and "add_.Tensor" not in theirs
    assert [op.replace("add_.Tensor", "add.Tensor") for op in ours] == theirs


def test_softmax_and_its_backward_hold_their_cuda_buffers_in_a_cuda_replay():
    """Measured op by op on an NVIDIA H100 (docs/benchmarks/op-memory-h100/): `_safe_softmax` allocates an `eq` mask
    of its input (1 byte per element), the all-masked rows and one 0-dim tensor beside its output; its backward a
    product the size of the gradient. A CUDA replay holds them at that moment; a CPU replay counts what the tracker of
    a real CPU run sees (the outputs)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from experiments.estimate.replay import replay_tracker

    shape, block = (2, 4, 100, 100), 512
    n = 2 * 4 * 100 * 100

    def rounded(nbytes):
        return -(-nbytes // block) * block

    for cuda in (True, False):
        tracker, log, _ = replay_tracker(block if cuda else 1)
        with FakeTensorMode(), tracker:
            x = torch.randn(shape)
            before = tracker.current
            y = torch.ops.aten._safe_softmax(x, -1)
            forward = tracker.peak
            grad = torch.randn(shape)
            at_backward = tracker.current
            torch.ops.aten._softmax_backward_data(grad, y, -1, torch.float32)
        out = rounded(4 * n) if cuda else 4 * n
        inner = rounded(n) + rounded(n // 100) + rounded(4) if cuda else 0
        assert forward == before + out + inner
        assert tracker.peak == max(forward, at_backward + out + (rounded(4 * n) if cuda else 0))
        if cuda:  # the allocator model sees them as blocks made together, then freed together
            held = [e for e in log.events if e[1] < 0]
            assert [e[0] for e in held] == ["alloc"] * 3 + ["free"] * 3 + ["alloc", "free"]
