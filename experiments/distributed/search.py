"""The batch searches of "What fits": the largest batch whose figure stays within a limit, for a figure that grows with
the batch nearly on a line (the allocated peak) or in steps (reserved memory). Torch-free; each call of `f` is a
replay, so both count their calls."""

from __future__ import annotations

import math


def crossing(f, capacity: int, limit: int, slope_hint: float = 0.0) -> int:
    """The largest b in [1, limit] with f(b) <= capacity (0 if none), for f growing with b and convex, nearly a line:
    the larger of two (a small batch's peak is the gradients', a large one's the activations'). Each guess is where
    a line crosses the capacity, kept strictly between the largest batch known to fit and the smallest known not to:
    1. through the two smallest batches known not to fit (for a convex f it lands at or past the crossing; exact
       where both are on the activations' line);
    2. through a fitting b and b+1 (the slope on the fitting side: at or past the crossing too);
    3. through the largest that fits and the smallest that does not (at or before it);
    4. through the two latest points, or from b=1 with `slope_hint`.
    A guess that fits is followed by b+1, where the crossing usually is; short of two points that do not fit, a
    step that does not halve the interval between the two sides, or a flat line, is followed by its middle."""
    seen = {1: f(1)}
    if seen[1] > capacity:
        return 0
    lo, hi, last, width = 1, limit + 1, [1], None
    while hi - lo > 1:
        over = sorted(b for b in seen if seen[b] > capacity)[:2]
        if len(over) == 2:
            (b0, b1), base = over, over[0]
        elif last[-2:] == [lo - 1, lo]:
            b0, b1, base = lo - 1, lo, lo
        elif hi in seen:
            b0, b1, base = lo, hi, lo
        elif len(last) >= 2:
            b0, b1, base = *last[-2:], last[-1]
        else:
            b0 = b1 = base = 1
        slope = (seen[b1] - seen[b0]) / (b1 - b0) if b1 != b0 else slope_hint
        middle = (lo + hi) // 2 if hi in seen else 2 * lo
        guess = base + math.floor((capacity - seen[base]) / slope) if slope > 0 else middle
        if len(over) < 2 and width is not None and hi - lo > width / 2:
            guess = middle
        width = hi - lo if hi in seen else None
        first = min(max(guess, lo + 1), hi - 1)
        for b in (first, first + 1):
            if b >= hi:
                break
            seen[b] = f(b)
            last.append(b)
            if seen[b] > capacity:
                hi = b
                break
            lo = b
    return lo


def below(f, limit: int, hi: int, f_hi: int, hint: int | None = None) -> int:
    """The largest n < hi with f(n) <= limit, for f that grows with n nearly on a line but in steps (reserved memory
    grows by whole segments): `hint` and the batch above it first, then false position between the largest n known
    to fit and the smallest known not to (at first the origin and hi), bisecting where a step did not halve the
    interval. 0 if not even n = 1 fits."""
    lo, f_lo, halved = 0, 0, True
    for n in (hint, None if hint is None else hint + 1):
        if n is None or not lo < n < hi:
            continue
        value = f(n)
        if value > limit:
            hi, f_hi = n, value
            break
        lo, f_lo = n, value
    while hi - lo > 1:
        if halved:
            guess = lo + int((hi - lo) * (limit - f_lo) / max(1, f_hi - f_lo))
        else:
            guess = (lo + hi) // 2
        guess = min(max(guess, lo + 1), hi - 1)
        width = hi - lo
        value = f(guess)
        if value <= limit:
            lo, f_lo = guess, value
        else:
            hi, f_hi = guess, value
        halved = (hi - lo) * 2 <= width
    return lo
