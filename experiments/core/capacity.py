"""The one capacity rule: what a run's estimate is compared with, in the runner and on the page. Torch-free."""

from __future__ import annotations

from .units import MIB


def capacity(budget_mb: float | None, free_bytes: int | None, cached_free_bytes: int = 0) -> int | None:
    """The learner's budget if set, capped by what the device has: free memory plus what this process's
    caching allocator holds unused (it can hand that out without asking the driver)."""
    available = None if free_bytes is None else free_bytes + max(0, cached_free_bytes)
    budget = None if budget_mb is None else int(budget_mb * MIB)
    if budget is None or available is None:
        return budget if budget is not None else available
    return min(budget, available)
