"""Quirk 13: masks a model makes itself, all of one value, read as a real run reads them.

Where no attention mask is passed, 82 transformers models make their own, `torch.ones(batch, seq)` (BART's and every
encoder-decoder's decoder, among others), and transformers' mask builders then ask whether it pads anything
(`fast_all(mask)`, `mask.all()`, `torch.all(mask == 1)`) so that SDPA can take `is_causal` instead of a 4-D mask. On
fake tensors `is_tracing(mask)` is true and the question is never asked: the replay builds the 4-D mask a real run
skips (B x 1 x S x S, and on CUDA another attention kernel). This mode knows the value of a tensor that a factory
filled with one number and that value-preserving ops carried on (a cast, a view, an index, a comparison with a
number, a reduction), so that `bool()` and `.item()` of such a tensor answer as on real tensors, with the same ops
run for their temporaries; masking_utils' `is_tracing` is false for such a tensor. Every other fake tensor is left
as it was: its value stays unknown and reading it still cannot be predicted.

A random number's range is known too: `torch.rand` draws from [0, 1), so a comparison that every value in the range
answers alike has one value. LayerDrop (`if torch.rand([]) < self.layerdrop: skip the layer`, BART's, Marian's and
other encoder-decoders' in transformers before 5.2x) then reads False at layerdrop 0, as every real run does; with a
layerdrop above 0 the real run skips layers at random and the replay still says it cannot be predicted.
"""

from __future__ import annotations

import contextlib
import operator

import torch
from torch.overrides import TorchFunctionMode

from .patching import is_fake, patched

_ATTR = "_gml_uniform_value"
_RANGE = "_gml_value_range"  # (low, high): every element lies in [low, high)
T = torch.Tensor
_FILLED = {torch.ones: 1, torch.ones_like: 1, T.new_ones: 1, torch.zeros: 0, torch.zeros_like: 0, T.new_zeros: 0}
_FULL = {torch.full: 1, T.new_full: 1, torch.full_like: 1}  # the fill value's position among the arguments
_SAME = {
    T.to, T.type, T.bool, T.float, T.half, T.bfloat16, T.long, T.int, T.double, T.contiguous, T.clone, torch.clone,
    T.detach, T.expand, T.expand_as, T.view, T.view_as, T.reshape, torch.reshape, T.unsqueeze, torch.unsqueeze,
    T.squeeze, T.flatten, T.__getitem__, T.repeat, T.permute, T.transpose, torch.transpose, T.narrow, T.select,
    T.cpu, T.cuda,
}  # fmt: skip
_BINARY = {
    T.__eq__: operator.eq, T.eq: operator.eq, torch.eq: operator.eq, T.__ne__: operator.ne, T.ne: operator.ne,
    torch.ne: operator.ne, T.__lt__: operator.lt, T.lt: operator.lt, T.__le__: operator.le, T.le: operator.le,
    T.__gt__: operator.gt, T.gt: operator.gt, T.__ge__: operator.ge, T.ge: operator.ge, torch.lt: operator.lt,
    torch.le: operator.le, torch.gt: operator.gt, torch.ge: operator.ge, T.__and__: operator.and_,
    T.__or__: operator.or_, T.__mul__: operator.mul, T.mul: operator.mul, T.__add__: operator.add, T.add: operator.add,
    T.__sub__: operator.sub, T.sub: operator.sub, T.__rsub__: lambda a, b: b - a, T.__rmul__: operator.mul,
    T.__radd__: operator.add, torch.logical_and: lambda a, b: bool(a) and bool(b),
    torch.logical_or: lambda a, b: bool(a) or bool(b),
}  # fmt: skip
_NEG = {T.__neg__, T.neg, torch.neg}
_FILL = {T.masked_fill, torch.masked_fill}
_NOT = {T.__invert__, T.bitwise_not, torch.bitwise_not, T.logical_not, torch.logical_not}
_ALL = {T.all, torch.all}
_ANY = {T.any, torch.any}
_SUM = {T.sum, torch.sum}
_SAME_REDUCED = {T.min, T.max, T.amin, T.amax, T.mean, torch.amin, torch.amax, torch.mean}
_READ = {T.__bool__, T.item}
_RANDOM = {torch.rand: (0.0, 1.0), torch.rand_like: (0.0, 1.0)}
_ORDER = {f: op for f, op in _BINARY.items() if op in (operator.lt, operator.le, operator.gt, operator.ge)}


def value_of(x):
    """The one value every element of `x` holds, where this mode knows it; a Python number is its own value."""
    if isinstance(x, (bool, int, float)):
        return x
    return getattr(x, _ATTR, None) if isinstance(x, torch.Tensor) else None


def _compared(func, low: float, high: float, c) -> bool | None:
    """`x OP c` where every x lies in [low, high): its one answer, or None where the range straddles c."""
    if not isinstance(c, (int, float)) or isinstance(c, bool) or func not in _ORDER:
        return None
    always, never = {
        operator.lt: (high <= c, low >= c),
        operator.le: (high <= c, low > c),
        operator.gt: (low > c, high <= c),
        operator.ge: (low >= c, high <= c),
    }[_ORDER[func]]
    return True if always else False if never else None


def _cast(value, t: torch.Tensor):
    if t.dtype is torch.bool:
        return bool(value)
    return float(value) if t.dtype.is_floating_point else int(value)


def _known(func, args, kwargs, out):
    """The value of `out`, or None."""
    if func in _FILLED:
        return _FILLED[func]
    if func in _FULL:
        pos = _FULL[func]
        fill = args[pos] if len(args) > pos else kwargs.get("fill_value")
        return fill if isinstance(fill, (bool, int, float)) else None
    if not args or not isinstance(args[0], torch.Tensor):
        return None
    span = getattr(args[0], _RANGE, None)
    if span is not None and len(args) > 1:
        return _compared(func, *span, args[1])
    v = value_of(args[0])
    if v is None:
        return None
    if func in _SAME or func in _SAME_REDUCED:  # a min, max or mean over some dims keeps the value too
        return v
    if func in _BINARY:
        w = value_of(args[1]) if len(args) > 1 else None
        return None if w is None else _BINARY[func](v, w)
    if func in _NEG:
        return -v
    if func in _FILL and len(args) == 3:
        where, fill = value_of(args[1]), value_of(args[2])
        return None if where is None else (fill if where else v)
    if func in _NOT:
        return (not v) if out.dtype is torch.bool else ~int(v)
    numel = args[0].numel()
    if func in _ALL:
        return bool(v) or numel == 0
    if func in _ANY:
        return bool(v) and numel > 0
    if func in _SUM and len(args) == 1 and not kwargs:
        return v * numel
    return None


class UniformValues(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        one = args and isinstance(args[0], torch.Tensor) and args[0].numel() == 1  # else a real read raises too
        if func in _READ and one and value_of(args[0]) is not None:
            v = value_of(args[0])
            return bool(v) if func is T.__bool__ else v
        out = func(*args, **kwargs)
        if _writes(func, args, kwargs):
            # An in-place op (masked_fill_, x[i] = 0, out=) may leave the values mixed: unknown from now on, for the
            # tensor and the one it is a view of.
            for t in (args[0], kwargs.get("out")):
                for x in (t, getattr(t, "_base", None)):
                    for attr in (_ATTR, _RANGE):
                        if isinstance(x, torch.Tensor) and hasattr(x, attr):
                            delattr(x, attr)
            return out
        if isinstance(out, torch.Tensor) and is_fake(out):
            if func in _RANDOM and out.is_floating_point():
                setattr(out, _RANGE, _RANDOM[func])
                return out
            v = _known(func, args, kwargs, out)
            if v is not None:
                setattr(out, _ATTR, _cast(v, out))
        return out


def _writes(func, args, kwargs) -> bool:
    name = getattr(func, "__name__", "")
    return "out" in kwargs or func is T.__setitem__ or (name.endswith("_") and not name.endswith("__") and bool(args))


def _not_tracing(original):
    def is_tracing(tensor=None):
        if isinstance(tensor, torch.Tensor) and value_of(tensor) is not None:
            return False
        return original(tensor) if tensor is not None else original()

    return is_tracing


@contextlib.contextmanager
def known_masks():
    """This mode, and masking_utils' `is_tracing` false for the tensors it knows."""
    from transformers import masking_utils

    with patched(masking_utils, "is_tracing", _not_tracing(masking_utils.is_tracing)), UniformValues():
        yield
