"""A replay with many micro-batches from one with four, where the micro-batches repeat. Torch-free.

With gradient accumulation every micro-batch after the first finds the gradients already there and does the same
thing: the same storages in the same order, the same bytes alive at the end of each phase and at its peak, the same
allocator blocks once the caching allocator has grown to them (in the second at most). A replay of 64 micro-batches
spent 60 of them repeating the third (135 CPU-seconds for a 64-layer transformer; 13 s now). So a replay of four
micro-batches is made, the fourth is checked against the third (every phase row, every allocator figure) and, where
they agree, copied for the ones after it; the step's work (FLOPs, bytes, kernels) adds the fourth's for each. Where they do not agree the whole replay runs (experiments/estimate/replay.py decides)."""

from __future__ import annotations

REPLAYED = (
    4  # the first differs (no gradients yet), the allocator may still grow in the second: the last two must agree
)

FIGURES = ("allocated_bytes", "peak_bytes")
MARK_FIGURES = ("reserved_bytes", "allocated_bytes", "peak_allocated_bytes")


def _same(a: dict, b: dict, keys) -> bool:
    return all(a.get(k) == b.get(k) for k in keys)


def extend(result: dict, accum: int) -> dict | None:
    """The replay of `accum` micro-batches from `result`, a replay of REPLAYED of them (its phase rows, allocator marks
    and the step's work per micro-batch, "micro_work"); None where its last two micro-batches disagree."""
    rows, marks = result["phases"], result["allocator"]["marks"]
    if len(rows) != len(marks):
        return None
    out_rows, out_marks = [], []
    i = 0
    while i < len(rows):
        row = rows[i]
        if row.get("micro") != REPLAYED - 1:
            out_rows.append(row)
            out_marks.append(marks[i])
            i += 1
            continue
        # the last replayed micro-batch's phases (forward, backward), and the one's before it
        j = i
        while j < len(rows) and rows[j].get("micro") == REPLAYED - 1:
            j += 1
        last = list(range(i, j))
        before = [k for k in range(i) if rows[k].get("micro") == REPLAYED - 2 and rows[k]["step"] == row["step"]]
        if len(before) != len(last) or not all(
            rows[a]["phase"] == rows[b]["phase"]
            and _same(rows[a], rows[b], FIGURES)
            and _same(marks[a], marks[b], MARK_FIGURES)
            for a, b in zip(before, last, strict=True)
        ):
            return None
        for micro in range(REPLAYED - 1, accum):
            out_rows += [dict(rows[k], micro=micro) for k in last]
            out_marks += [marks[k] for k in last]
        i = j
    work = result.get("micro_work")
    step = dict(result["step"])
    if work is not None:
        step = {k: v + (accum - REPLAYED) * work.get(k, 0) for k, v in step.items()}
    allocator = dict(result["allocator"], marks=out_marks)
    return dict(result, phases=out_rows, allocator=allocator, step=step)
