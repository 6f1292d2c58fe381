"""A tracked step sums two gradients of one tensor where a plain engine does: in place when the engine alone holds
the first, out of place otherwise. Checked against the profiler's record of the same step run without any dispatch
mode (its allocations, in order), an independent count of what a plain loop allocates."""

from __future__ import annotations

import pytest
import torch
from torch._C._profiler import _EventType
from torch.profiler import ProfilerActivity, profile

from experiments.measure import engine_sums
from experiments.measure.tracker import MemoryTracker

KEPT: list = []


class KeepsItsGradient(torch.autograd.Function):
    """Its backward keeps the gradient it returns (as a hook that stores gradients would): the engine may not sum
    into it in place."""

    @staticmethod
    def forward(ctx, t):
        return t * 1.5

    @staticmethod
    def backward(ctx, g):
        out = g * 1.5
        KEPT.append(out)
        return out


def _step(keep: bool) -> None:
    torch.manual_seed(0)
    x = torch.randn(2048, 64)
    w = torch.randn(64, 512, requires_grad=True)
    h = x @ w
    # Two branches of h: their gradients meet in h's input buffer while both are alive, the step's peak.
    second = KeepsItsGradient.apply(h) if keep else torch.cos(h)
    y = torch.sin(h) * 2 + second
    (y * y).sum().backward()
    KEPT.clear()


def _profiled(keep: bool) -> tuple[int, int]:
    """(peak, bytes allocated in all) of the step without a mode."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        _step(keep)
    sizes = []

    def walk(node):
        if node.typed[0] == _EventType.Allocation:
            sizes.append((node.start_time_ns, node.typed[1].alloc_size))
        for child in node.children:
            walk(child)

    for root in prof.profiler.kineto_results.experimental_event_tree():
        walk(root)
    live = peak = 0
    for _, n in sorted(sizes):
        live += n
        peak = max(peak, live)
    return peak, sum(n for _, n in sizes if n > 0)


class _Total:
    def __init__(self):
        self.bytes = 0

    def allocated(self, tracker, key, record, tensor, requested):
        self.bytes += record.nbytes


def _tracked(keep: bool) -> tuple[int, int]:
    total = _Total()
    tracker = MemoryTracker(listeners=[total])
    with tracker:
        _step(keep)
    return tracker.peak, total.bytes


@pytest.fixture(autouse=True)
def _enabled(monkeypatch):
    monkeypatch.setattr(engine_sums, "ENABLED", True)


def test_the_reference_counts_of_a_gradient_only_the_engine_holds_are_measured():
    assert engine_sums.baseline() is not None


@pytest.mark.parametrize("keep", [False, True], ids=["engine-alone", "kept-elsewhere"])
def test_a_tracked_step_allocates_what_the_same_step_allocates_without_a_mode(keep):
    _step(keep)  # warm: the first call allocates the profiler's and the kernels' own state
    (peak, total), (plain_peak, plain_total) = _tracked(keep), _profiled(keep)
    assert peak == plain_peak
    # The profiler also sees the 4- and 8-byte scalars the kernels wrap their numbers in, which are no op's output.
    assert 0 <= plain_total - total <= 64


def test_summing_out_of_place_would_allocate_a_gradient_per_sum(monkeypatch):
    in_place = _tracked(False)[1]
    monkeypatch.setattr(engine_sums, "ENABLED", False)
    # Two sums of [2048, 512] fp32 gradients: y's two (y * y) and h's two branches.
    assert _tracked(False)[1] == in_place + 2 * 2048 * 512 * 4


def test_an_add_outside_backward_or_with_alpha_is_never_the_engines_sum():
    a, b = torch.ones(4), torch.ones(4)
    add = torch.ops.aten.add.Tensor
    assert not engine_sums.is_engine_sum(add, (a, b), {})  # not in backward
    assert not engine_sums.is_engine_sum(add, (a, b), {"alpha": 2})
    assert not engine_sums.is_engine_sum(torch.ops.aten.mul.Tensor, (a, b), {})
