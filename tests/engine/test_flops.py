"""A run's FLOP count for grouped-query attention (experiments/measure/flops.py). torch 2.11's FlopCounterMode refused
shapes with fewer key/value heads than query heads (an AssertionError that ended a CUDA run of a Llama-shaped model
after it had measured everything else); the fused kernels broadcast them, so they count as the query's heads."""

from __future__ import annotations

import pytest
import torch
from torch.utils import flop_counter as fc

from experiments.measure import flops

Q, KV = (2, 8, 16, 64), (2, 2, 16, 64)  # batch 2, 8 query heads sharing 2 key/value heads, 16 positions, 64 dims
# By hand: scores (q @ k^T) and output (p @ v), 2 FLOPs a multiply-add, every query head: 2 * 2*8*16*16*64 each.
FORWARD = 2 * (2 * 2 * 8 * 16 * 16 * 64)
# Backward: scores again, grad of p and of v, grad of q and of k: five such products.
BACKWARD = 5 * (2 * 2 * 8 * 16 * 16 * 64)


def _strict(count):
    """torch 2.11's formulas: every tensor must have the query's heads."""

    def strict(*shapes):
        if len({s[1] for s in shapes}) != 1:
            raise AssertionError("sdpa_flop_count: query/key/value shapes are incompatible")
        return count(*shapes)

    return strict


@pytest.fixture
def torch_2_11(monkeypatch):
    monkeypatch.setattr(fc, "sdpa_flop_count", _strict(fc.sdpa_flop_count))
    monkeypatch.setattr(fc, "sdpa_backward_flop_count", _strict(fc.sdpa_backward_flop_count))
    flops.counts_grouped_heads.cache_clear()
    yield
    flops.counts_grouped_heads.cache_clear()


def test_grouped_heads_count_as_the_querys_heads():
    assert flops.attention_forward(Q, KV, KV) == FORWARD
    assert flops.attention_backward(Q, Q, KV, KV) == BACKWARD


def _fused_attention(counter) -> int:
    q = torch.empty(Q, device="meta", dtype=torch.bfloat16)
    kv = torch.empty(KV, device="meta", dtype=torch.bfloat16)
    with counter as c:
        torch.ops.aten._scaled_dot_product_efficient_attention(q, kv, kv, None, True)
    return c.get_total_flops()


def test_where_torch_refuses_grouped_heads_the_run_counts_them(torch_2_11):
    assert not flops.counts_grouped_heads()
    with pytest.raises(AssertionError):  # the failure a CUDA run of a Llama-shaped model ended with
        _fused_attention(fc.FlopCounterMode(display=False))
    assert _fused_attention(flops.flop_counter()) == FORWARD
    assert flops.formulas()[torch.ops.aten._scaled_dot_product_efficient_attention] is not fc.flop_registry.get(
        torch.ops.aten._scaled_dot_product_efficient_attention
    )


def test_where_torch_counts_grouped_heads_its_own_formulas_are_kept():
    if not flops.counts_grouped_heads():
        pytest.skip(f"torch {torch.__version__} does not count grouped heads itself")
    assert _fused_attention(flops.flop_counter()) == FORWARD == fc.sdpa_flop_count(Q, KV, KV)
    assert flops.formulas() == fc.flop_registry
