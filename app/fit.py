"""'What would fit': searches the estimator for the largest batch under a memory capacity."""

from __future__ import annotations

from experiments.config import RANGES, ConfigError


def largest_fitting_batch(cfg, capacity: int, estimate, upper: int | None = None) -> int | None:
    """Largest multiple of cfg.accum whose estimated peak is <= capacity (the estimate grows with batch).

    `estimate(cfg) -> dict | None` is injected so the search can reuse the app's cached estimator;
    `upper`: a batch known not to fit, if any.
    None if even batch = accum does not fit.
    """

    def fits(batch: int) -> bool:
        try:
            est = estimate(cfg.replace(batch=batch))
        except ConfigError:
            return False
        return bool(est) and est["peak_bytes"] <= capacity

    step = cfg.accum
    # A known upper bound (the batch that did not fit) keeps the search to a few replays of the estimator.
    lo, hi = 1, (upper or RANGES["batch"][1]) // step  # in units of accum
    if not fits(lo * step):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid * step):
            lo = mid
        else:
            hi = mid - 1
    return lo * step
