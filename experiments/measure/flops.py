"""A training step's floating-point operations, by torch's FlopCounterMode. Before torch 2.13 its attention formulas
refuse grouped-query shapes (fewer key/value heads than query heads) with an AssertionError, which ended a CUDA run of
any such model (Llama, Mistral, Qwen: fused attention kernels take the grouped heads as they are) after it had
measured everything else. The kernels broadcast the key/value heads to the query's, so they are counted as that many,
as torch 2.13's own formulas count them."""

from __future__ import annotations

import functools

import torch
from torch.utils import flop_counter as fc

aten = torch.ops.aten
FORWARD = (
    aten._scaled_dot_product_efficient_attention,
    aten._scaled_dot_product_flash_attention,
    aten._scaled_dot_product_cudnn_attention,
)
BACKWARD = (
    aten._scaled_dot_product_efficient_attention_backward,
    aten._scaled_dot_product_flash_attention_backward,
    aten._scaled_dot_product_cudnn_attention_backward,
)


def _as_query_heads(query_shape, shape) -> tuple[int, ...]:
    return (shape[0], query_shape[1], *shape[2:])


def attention_forward(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    k, v = _as_query_heads(query_shape, key_shape), _as_query_heads(query_shape, value_shape)
    return fc.sdpa_flop_count(query_shape, k, v)


def attention_backward(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    k, v = _as_query_heads(query_shape, key_shape), _as_query_heads(query_shape, value_shape)
    return fc.sdpa_backward_flop_count(grad_out_shape, query_shape, k, v)


@functools.cache
def counts_grouped_heads() -> bool:
    """Whether this torch's own formulas take grouped-query shapes."""
    try:
        fc.sdpa_flop_count((1, 4, 2, 8), (1, 2, 2, 8), (1, 2, 2, 8))
    except AssertionError:
        return False
    return True


def _grouped() -> dict:
    """The attention formulas that count grouped heads, where this torch's own do not (shape-level, as torch's)."""
    if counts_grouped_heads():
        return {}
    return {**dict.fromkeys(FORWARD, attention_forward), **dict.fromkeys(BACKWARD, attention_backward)}


def formulas() -> dict:
    """op -> its FLOP count from the op's arguments, as FlopCounterMode counts (the replay asks these directly)."""
    return {**fc.flop_registry, **{op: fc.shape_wrapper(f) for op, f in _grouped().items()}}


def flop_counter() -> fc.FlopCounterMode:
    return fc.FlopCounterMode(display=False, custom_mapping=_grouped())
