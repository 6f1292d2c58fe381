"""Which of several equal free blocks the real caching allocator took, read from allocator histories
(benchmarks/trial_history.py, or any `torch.cuda.memory._snapshot()` trace saved as [action, size, address, frames]).

For every allocation that had more than one free block of the size it took (in the same pool, no new segment), it
counts whether the block was the lowest address (the allocator's own order), and which of three tie rules of the
allocator model would have picked it: the oldest segment first (experiments/estimate/allocator_model.py), the newest
first, or 20 MiB segments oldest first and larger ones newest first. It also says how often a new large segment got
an address below the one made before it.

    python benchmarks/placement_ties.py docs/benchmarks/trial-history-h200/*.json.gz docs/benchmarks/trial-history-h100/*.json.gz
"""

from __future__ import annotations

import gzip
import json
import sys

MIB = 2**20
RULES = ("oldest_first", "newest_first", "20mib_oldest_larger_newest")


def free_blocks(start: int, size: int, live: dict[int, int]) -> list[tuple[int, int]]:
    """The free blocks (address, bytes) of the segment at `start`: the gaps between its live blocks."""
    inside = sorted((a, n) for a, n in live.items() if start <= a < start + size)
    out, cur = [], start
    for a, n in inside:
        if a > cur:
            out.append((cur, a - cur))
        cur = a + n
    if cur < start + size:
        out.append((cur, start + size - cur))
    return out


def _rank(rule: str, seg_size: int, made: int, offset: int) -> tuple:
    if rule == "oldest_first":
        return (made, offset)
    if rule == "newest_first":
        return (-made, offset)
    return (0, made, offset) if seg_size <= 20 * MIB else (1, -made, offset)


def ties(events: list) -> dict:
    segs: dict[int, tuple[int, int]] = {}  # address -> (size, order made)
    live: dict[int, int] = {}
    made: list[tuple[int, int]] = []
    out = {"ties": 0, "lowest_address": 0, **dict.fromkeys(RULES, 0)}
    for i, (action, n, addr, _frames) in enumerate(events):
        if action == "segment_alloc":
            segs[addr] = (n, len(made))
            made.append((addr, n))
        elif action == "segment_free":
            segs.pop(addr, None)
        elif action == "free_completed":
            live.pop(addr, None)
        elif action == "alloc":
            new = i > 0 and events[i - 1][0] == "segment_alloc" and events[i - 1][2] == addr
            seg = next((s for s in segs if s <= addr < s + segs[s][0]), None)
            if seg is not None and not new:
                small = segs[seg][0] == 2 * MIB
                taken = next(g for g in free_blocks(seg, segs[seg][0], live) if g[0] <= addr < g[0] + g[1])
                cands = [
                    (g, s)
                    for s in segs
                    if (segs[s][0] == 2 * MIB) == small
                    for g in free_blocks(s, segs[s][0], live)
                    if g[1] == taken[1]
                ]
                if len(cands) > 1:
                    out["ties"] += 1
                    out["lowest_address"] += taken[0] == min(g[0] for g, _ in cands)
                    for rule in RULES:
                        pick = min(cands, key=lambda c, r=rule: _rank(r, segs[c[1]][0], segs[c[1]][1], c[0][0] - c[1]))
                        out[rule] += pick[0][0] == taken[0]
            live[addr] = n
    large = [(a, n) for a, n in made if n != 2 * MIB]
    below = [large[k + 1][0] < large[k][0] for k in range(len(large) - 1)]
    out["new_large_segments_below_the_last"] = f"{sum(below)} of {len(below)}"
    twenty = [b for b, (_, n) in zip(below, large[1:], strict=True) if n == 20 * MIB]
    out["of_them_20_mib"] = f"{sum(twenty)} of {len(twenty)}"
    return out


def main() -> None:
    for path in sys.argv[1:]:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt") as f:
            print(path, json.dumps(ties(json.load(f)["events"])))


if __name__ == "__main__":
    main()
