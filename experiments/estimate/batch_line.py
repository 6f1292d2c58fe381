"""A run's allocation trace at any batch, from the traces of three batches, where that is exact. Torch-free.

A training step at batch n makes the same storages in the same order for every n; each storage's size is either fixed
(parameters, gradients, optimizer state, workspaces) or grows with the samples (activations, the batch itself), so it
is affine in n. Three traces that agree in every event, with every size on one line, give the trace at any n: what
"What fits" needs at every batch it tries, for one replay less per batch (experiments/distributed/model_fits.py). A
model where that does not hold (an op whose sizes are not affine in the batch, a path that changes with it) gives
three traces that disagree, and `line` says so with None. One kind of size is not affine and still follows from the
batch: a kernel's scratch (reduce_scratch.Buffer: a split reduction's, layer norm's backward's), which grows with its
shape until every SM is busy, and is 0 bytes at a batch where the kernel takes no such buffer. Its shape is on the
line, and the buffer is computed again from it at each batch.

Events are the replay's ("alloc", key, bytes) / ("free", key, 0) / ("mark", i, 0) (allocator_model.AllocationLog).
Frees in a row may come in any order between two replays (a set's order): the order within a run of frees changes
neither what is alive nor what the allocator can give."""

from __future__ import annotations

from .reduce_scratch import Buffer


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
        if all(isinstance(s, Buffer) for s in (s0, s1, s2)):
            slopes.append(_buffer_slope(s0, s1, s2, b1 - b0))
            if slopes[-1] is None:
                return None
            continue
        if s1 - s0 != s2 - s1 or (s1 - s0) % (b1 - b0):
            return None
        slopes.append((s1 - s0) // (b1 - b0))
    return {"at": b0, "events": t0, "slopes": slopes}


def _affine(values: tuple, step: int) -> tuple | None:
    """Per position the change one sample makes, where three values equally spaced by `step` samples are on a line."""
    out = []
    for v0, v1, v2 in zip(*values, strict=True):
        if v1 - v0 != v2 - v1 or (v1 - v0) % step:
            return None
        out.append((v1 - v0) // step)
    return tuple(out)


def _buffer_slope(s0: Buffer, s1: Buffer, s2: Buffer, step: int) -> tuple | None:
    """("buffer", the kernel call's spec at the first sample, its shape's and strides' slopes, the buffer's index, the
    kernel), where the three buffers belong to the same kernel call whose shape and strides are on a line; None
    otherwise."""
    (sh0, st0, *rest0), (sh1, st1, *rest1), (sh2, st2, *rest2) = s0.spec, s1.spec, s2.spec
    same = rest0 == rest1 == rest2 and s0.kernel is s1.kernel is s2.kernel and s0.index == s1.index == s2.index
    if not (same and len(sh0) == len(sh1) == len(sh2)):
        return None
    shape, strides = _affine((sh0, sh1, sh2), step), _affine((st0, st1, st2), step)
    if shape is None or strides is None:
        return None
    return ("buffer", s0.spec, shape, strides, s0.index, s0.kernel)


def _buffer_at(slope: tuple, d: int) -> Buffer | None:
    """The buffer of a line's kernel call `d` samples past the first: 0 bytes where the kernel takes no such buffer
    there, None where the replay holds none for it (a sum past 32-bit indexing, reduce_scratch.buffers)."""
    _, (shape, strides, *rest), dshape, dstrides, index, kernel = slope
    spec = (
        tuple(n + d * k for n, k in zip(shape, dshape, strict=True)),
        tuple(n + d * k for n, k in zip(strides, dstrides, strict=True)),
        *rest,
    )
    found = kernel(*spec)
    return None if found is None else Buffer(found[index] if found else 0, spec, index, kernel)


def trace_at(fit: dict, batch: int) -> list:
    """The trace at `batch` (at or above the first sampled batch: a smaller one may take another path)."""
    if batch < fit["at"]:
        raise ValueError(f"batch: {batch} is below the line's first sample {fit['at']}")
    out, i, d, gone = [], 0, batch - fit["at"], set()
    for event in fit["events"]:
        if event[0] == "alloc":
            slope = fit["slopes"][i]
            i += 1
            nbytes = _buffer_at(slope, d) if isinstance(slope, tuple) else event[2] + d * slope
            if nbytes is None:  # as the replay: no buffer, made or freed
                gone.add(event[1])
                continue
            out.append(("alloc", event[1], nbytes))
        elif not (event[0] == "free" and event[1] in gone):
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
