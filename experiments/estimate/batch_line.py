"""A run's allocation trace at any batch, from the traces of three batches, where that is exact. Torch-free.

A training step at batch n makes the same storages in the same order for every n; each storage's size is either fixed
(parameters, gradients, optimizer state, workspaces) or grows with the samples (activations, the batch itself), so it
is affine in n. Three traces that agree in every event, with every size on one line, give the trace at any n: what
"What fits" needs at every batch it tries, for one replay less per batch (experiments/distributed/model_fits.py). A
model where that does not hold (an op whose sizes are not affine in the batch, a path that changes with it) gives
three traces that disagree, and `line` says so with None.

Events are the replay's ("alloc", key, bytes) / ("free", key, 0) / ("mark", i, 0) (allocator_model.AllocationLog).
Frees in a row may come in any order between two replays (a set's order): the order within a run of frees changes
neither what is alive nor what the allocator can give."""

from __future__ import annotations


def event_shape(events: list) -> list:
    """The trace's events without its keys' values: each storage numbered as made, each run of frees sorted."""
    ids, made, out, frees = {}, 0, [], []
    for kind, key, _ in events:
        if kind == "free":
            frees.append(ids.get(key, -1))
            continue
        out += [("free", i) for i in sorted(frees)]
        frees = []
        if kind == "alloc":
            ids[key] = made
            out.append(("alloc", made))
            made += 1
        else:
            out.append((kind, key))
    return out + [("free", i) for i in sorted(frees)]


def line(batches: tuple[int, int, int], traces: list[list]) -> dict | None:
    """{"at": the first batch, "events": its trace, "slopes": per event the bytes one more sample adds} where the
    three traces (at batches equally spaced) agree in every event and every size is on a line; None otherwise."""
    (b0, b1, b2), (t0, t1, t2) = batches, traces
    if b1 - b0 != b2 - b1 or not b0 < b1 or not len(t0) == len(t1) == len(t2):
        return None
    if not event_shape(t0) == event_shape(t1) == event_shape(t2):
        return None
    sizes = [[n for kind, _, n in t if kind == "alloc"] for t in traces]
    slopes = []
    for s0, s1, s2 in zip(*sizes, strict=True):
        if s1 - s0 != s2 - s1 or (s1 - s0) % (b1 - b0):
            return None
        slopes.append((s1 - s0) // (b1 - b0))
    return {"at": b0, "events": t0, "slopes": slopes}


def trace_at(fit: dict, batch: int) -> list:
    """The trace at `batch` (at or above the first sampled batch: a smaller one may take another path)."""
    if batch < fit["at"]:
        raise ValueError(f"batch: {batch} is below the line's first sample {fit['at']}")
    out, i, d = [], 0, batch - fit["at"]
    for event in fit["events"]:
        if event[0] == "alloc":
            out.append(("alloc", event[1], event[2] + d * fit["slopes"][i]))
            i += 1
        else:
            out.append(event)
    return out


def phase_figures(events: list, block: int) -> list[tuple[int, int]]:
    """(bytes alive at the end, most bytes alive) per phase, storages rounded up to `block`: the replay's phase rows'
    allocated and peak figures."""
    live, peak, sizes, out = 0, 0, {}, []
    for kind, key, nbytes in events:
        if kind == "alloc":
            nbytes = -(-nbytes // block) * block
            sizes[key] = nbytes
            live += nbytes
            peak = max(peak, live)
        elif kind == "free":
            live -= sizes.pop(key, 0)
        else:
            out.append((live, peak))
            peak = live
    return out
