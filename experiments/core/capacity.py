"""The one capacity rule: what a run's estimate is compared with, in the runner and on the page. Torch-free."""

from __future__ import annotations

from .units import MIB

# What a CPU run costs the worker process beyond its tensors (allocator slack, autograd's bookkeeping, code and
# kernels loaded on first use): a fixed part and a share of the tensors; and what a fresh process with torch and the
# engine holds before any tensor (a data-parallel rank). Measured by benchmarks/worker_rss.py (docs/worker-rss.json:
# 114 MB beyond 143 MB of tensors on a first run, 306 MB beyond 1.79 GB; torch imported: 218 MB), rounded up.
PROCESS_MARGIN_BYTES = 128 * MIB
PROCESS_MARGIN_SHARE = 0.10
PROCESS_BASE_BYTES = 256 * MIB


# The allocator model's reserved figure against the measured one on the H200, at full size with the kernels' scratch
# memory measured (docs/model-presets-h200.txt, first table): 0.10-1.29 % under for every preset but ResNet-50
# (1.95 % over). "What fits on a card" asks the reserved estimate to fit with this much to spare. It counts on the
# allocator giving cached segments back where the card is full (the allocator model plays the trace against the card's
# own limit), but not on the margin: a run whose reserved peak, after giving back, still comes within it of the card
# is too close to call (docs/benchmarks/fits-boundary.md: on the emulated cards' trials this rule answered none above
# its boundary but the fragmentation below it, while giving back at the margin's limit put three above).
RESERVED_MARGIN = 0.015


def reserved_limit(budget: int) -> int:
    """The most a run's reserved estimate may take of `budget` bytes: the rest is the margin above."""
    return int(budget / (1 + RESERVED_MARGIN))


def process_margin_bytes(tensor_bytes: int = 0, fresh: bool = False) -> int:
    """Memory a CPU run of `tensor_bytes` needs besides them: the margin, plus a new process's own (`fresh`: a rank)."""
    return int(PROCESS_MARGIN_BYTES + PROCESS_MARGIN_SHARE * tensor_bytes + (PROCESS_BASE_BYTES if fresh else 0))


def cpu_free_for_tensors(free_bytes: int | None) -> int | None:
    """The machine's free memory less the worker's own margin: what a CPU run's tensors may use (on a CPU running
    past the free memory is a kill by the system, not an error a learner can read)."""
    return None if free_bytes is None else max(0, int((free_bytes - PROCESS_MARGIN_BYTES) / (1 + PROCESS_MARGIN_SHARE)))


def capacity(budget_mb: float | None, free_bytes: int | None, cached_free_bytes: int = 0) -> int | None:
    """The learner's budget if set, capped by what the device has: free memory plus what this process's
    caching allocator holds unused (it can hand that out without asking the driver)."""
    available = None if free_bytes is None else free_bytes + max(0, cached_free_bytes)
    budget = None if budget_mb is None else int(budget_mb * MIB)
    if budget is None or available is None:
        return budget if budget is not None else available
    return min(budget, available)


def verdict(peak_bytes: int, capacity_bytes: int | None) -> dict:
    """An estimate's "fits" against a capacity. Kept apart from the replay, which does not depend on it: a device's
    free memory moves after every run, and a cache of estimates keyed by it would replay every configuration again."""
    return {"capacity_bytes": capacity_bytes, "fits": None if capacity_bytes is None else peak_bytes <= capacity_bytes}
