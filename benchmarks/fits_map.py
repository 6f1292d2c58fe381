"""The allocator model's verdict at every batch of a range, for one boundary cell: where "What fits" says a run gets
through a card and where not, batch by batch, to set beside real trials at the same batches (benchmarks/
boundary_trial.py). Near a card's limit the default allocator's verdict need not grow with the batch: a batch can fail
on a large request that no cached block holds while a larger one gets through (docs/benchmarks/fits-boundary.md,
"The model's verdict batch by batch"). Torch on the CPU.

    python benchmarks/fits_map.py vit-b16 t4-16gb '{"precision": "amp_bf16", "optimizer_impl": "fused",
        "checkpoint": "per_layer"}' 795 830 [--expandable]

Each line: batch, the allocated peak, the reserved peak as the model gives cached segments back at the card's limit
("-" where it cannot get through), the request it fails on at that limit ("-" where none), and whether the search
counts it as running (through, within the margin).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from boundary_trial import config  # noqa: E402 - after the path

from experiments.core.capacity import reserved_limit  # noqa: E402
from experiments.core.cards import card, overhead_bytes  # noqa: E402
from experiments.distributed.fits_traces import replayed_events  # noqa: E402
from experiments.distributed.model_fits import card_reserved  # noqa: E402
from experiments.estimate.allocator_limit import first_oom, reserved_through  # noqa: E402
from experiments.estimate.batch_line import phase_figures  # noqa: E402


def allocated_peak(events: list) -> int:
    """The most bytes alive at once, unrounded (a closing mark makes the last phase count)."""
    return max((peak for _, peak in phase_figures([*events, ("mark", 0, 0)], 1)), default=0)


def verdicts(preset: str, card_id: str, levers: dict, batches, expandable: bool = False):
    """(batch, allocated peak, reserved peak or None, the failing request or None, runs) per batch: each from a
    replay at its own batch, never from the batch line."""
    c = card(card_id)
    budget = max(0, c["total_bytes"] - overhead_bytes(c))
    limit = reserved_limit(budget)
    for b in batches:
        events = replayed_events(config(preset, levers, b), None, {})
        oom = first_oom(events, budget, expandable)
        yield (
            b,
            allocated_peak(events),
            reserved_through(events, budget, expandable),
            oom and oom["request_bytes"],
            card_reserved(events, budget, expandable) <= limit,
        )


def main() -> None:
    preset, card_id, levers, lo, hi = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), *map(int, sys.argv[4:6])
    expandable = "--expandable" in sys.argv[6:]
    print("batch  allocated peak  reserved peak   fails asking  runs")
    for b, alloc, reserved, request, runs in verdicts(preset, card_id, levers, range(lo, hi + 1), expandable):
        reserved, request = ("-" if x is None else f"{x:,}" for x in (reserved, request))
        print(f"{b:5}  {alloc:14,}  {reserved:>14}  {request:>12}  {'yes' if runs else 'no'}", flush=True)


if __name__ == "__main__":
    main()
