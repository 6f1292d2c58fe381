"""Where the allocator model places a run's large tensors differently from the real caching allocator: a trial's
allocator history (benchmarks/trial_history.py) against the replay of the same configuration played through the model.

For every allocation of at least --min-mib, in order, each side's free block that took it (its size; "new" for a new
segment). The first allocations on which the two differ are listed: before them the model's layout is the real one's.

    python benchmarks/placement_compare.py docs/benchmarks/trial-history-h200/mistral-h200-61.json.gz \
        mistral-7b '{"precision": "bf16", "optimizer_impl": "foreach", "checkpoint": "per_layer"}' 61 --card-bytes 150109880320
"""

from __future__ import annotations

import argparse
import bisect
import gzip
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from placement_ties import free_blocks  # noqa: E402 - after the path

MIB = 2**20


def real_placements(events: list, least: int) -> list[tuple[int, int, int | None, str]]:
    """(event index, bytes, size of the free block it landed in or None for a new segment, frame) up to an OOM."""
    segments, live, out = {}, {}, []
    for i, (action, n, addr, frames) in enumerate(events):
        if action == "oom":
            break
        if action == "segment_alloc":
            segments[addr] = n
        elif action == "segment_free":
            segments.pop(addr, None)
        elif action == "free_completed":
            live.pop(addr, None)
        elif action == "alloc":
            if n >= least:
                new = i > 0 and events[i - 1][0] == "segment_alloc" and events[i - 1][2] == addr
                out.append((i, n, None if new else _gap(segments, live, addr), (frames or [""])[0]))
            live[addr] = n
    return out


def _gap(segments: dict, live: dict, addr: int) -> int | None:
    """The size of the free block `addr` is being placed in (placement_ties.py's blocks of a segment)."""
    for start, size in segments.items():
        if start <= addr < start + size:
            return next(n for a, n in free_blocks(start, size, live) if a <= addr < a + n)
    return None


def model_placements(events: list, limit: int, least: int) -> list[tuple[int, int, int | None]]:
    from experiments.estimate.allocator_limit import LimitedAllocator

    model, out = LimitedAllocator(limit), []
    for i, (kind, key, n) in enumerate(events):
        if kind == "alloc":
            if n >= least:
                pool = model._free["large"]
                j = bisect.bisect_left(pool, (-(-n // 512) * 512, -(1 << 62), -1))
                out.append((i, n, pool[j][0] if j < len(pool) else None))
            model.malloc(key, n)
        elif kind == "free":
            model.free(key)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("history", help="benchmarks/trial_history.py's output (.json or .json.gz)")
    ap.add_argument("preset")
    ap.add_argument("levers", help="JSON")
    ap.add_argument("batch", type=int)
    ap.add_argument(
        "--card-bytes", type=int, help="the emulated card's bytes (the trial's card_bytes): the model's cap"
    )
    ap.add_argument("--min-mib", type=float, default=256)
    ap.add_argument("--show", type=int, default=8)
    args = ap.parse_args()
    from boundary_trial import config

    from experiments.estimate.estimator import cuda_config
    from experiments.estimate.replay import replay

    opener = gzip.open if args.history.endswith(".gz") else open
    with opener(args.history, "rt") as f:
        data = json.load(f)
    # The model gives cached segments back only at its cap; without one it places every block as it would below it.
    limit = args.card_bytes - data["trial"]["outside_start_bytes"] if args.card_bytes else 1 << 62
    least = int(args.min_mib * MIB)
    real = real_placements(data["events"], least)
    cfg = cuda_config(config(args.preset, json.loads(args.levers), args.batch))
    model = model_placements(replay(cfg, block=512, keep_events=True)["events"], limit, least)
    same = 0
    for r, m in zip(real, model, strict=False):
        if r[1] != m[1] or r[2] != m[2]:
            break
        same += 1
    print(f"the same block size for the first {same} of {len(real)} allocations of {args.min_mib:g} MiB or more")

    def size(n):
        return "new" if n is None else f"{n / MIB:.0f}"

    for r, m in list(zip(real, model, strict=False))[same : same + args.show]:
        print(
            f"  real #{r[0]} {r[1] / MIB:.0f} MiB into {size(r[2])} ({r[3]})"
            f" | model #{m[0]} {m[1] / MIB:.0f} MiB into {size(m[2])}"
        )


if __name__ == "__main__":
    main()
