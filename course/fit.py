"""'What would fit': searches the estimator for the largest batch under a memory capacity."""

from __future__ import annotations

from experiments.core.config import RANGES, ConfigError


def largest_fitting_batch(cfg, capacity: int, estimate, upper: int | None = None) -> int | None:
    """Largest multiple of cfg.accum whose estimated peak is <= capacity (the estimate grows with batch).

    `estimate(cfg) -> dict | None` is injected so the search can reuse the app's cached estimator;
    `upper`: a batch known not to fit, if any.
    None if even batch = accum does not fit.
    """
    step = cfg.accum
    peaks: dict[int, int | None] = {}

    def peak(units: int) -> int | None:
        if units not in peaks:
            try:
                est = estimate(cfg.replace(batch=units * step))
            except ConfigError:
                est = None
            peaks[units] = est["peak_bytes"] if est else None
        return peaks[units]

    def fits(units: int) -> bool:
        p = peak(units)
        return p is not None and p <= capacity

    lo, hi = 1, (upper or RANGES["batch"][1]) // step  # in units of accum: lo fits, nothing above hi does
    if not fits(lo):
        return None
    if fits(hi):
        return hi * step
    # The peak grows about linearly with the batch (activations), so the line through the bracket's ends
    # points close to the boundary, and once both ends sit on one linear piece, exactly at it: a few replays
    # of the estimator where plain bisection over the whole range needs seventeen. Bisection takes over
    # whenever a guess did not halve the bracket, so jumps in the curve cannot make it slow.
    bisect = False
    while hi - lo > 1:
        a, b = peak(lo), peak(hi)
        if bisect or b is None or b <= a:
            guess = (lo + hi) // 2
        else:
            guess = min(max(lo + int((capacity - a) * (hi - lo) / (b - a)), lo + 1), hi - 1)
        before, guided = hi - lo, not bisect
        if fits(guess):
            lo = guess
            if guided and guess + 1 < hi and not fits(guess + 1):
                hi = guess + 1
        else:
            hi = guess
            if guided and guess - 1 > lo and fits(guess - 1):
                lo = guess - 1
        bisect = guided and hi - lo > before // 2
    return lo * step
