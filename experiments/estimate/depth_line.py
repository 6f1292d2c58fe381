"""A deep model's allocation trace from the traces of three shallow ones, where that is exact. Torch-free.

In a model of alike layers, one more layer adds the same events at the same places of a training step's trace: a
block in the forward after the layer before it, one in the backward, its share of the zeroing and of each optimizer
step. Where a block went in, the shallow trace already holds copies of it (its own layers): a run. The trace with
D + n layers is the trace with D layers with each run n copies longer. What the sizes do not say is which storage a
free gives back: its own layer's (the same copy), its neighbour's (the copy before or after it, in the forward's order
or the backward's reversed one), one outside the layers, or, for the copies nearest an end of the run, something else
(the first layer's input is the embedding's output). Those rules are read from the three traces (n = 0, 1, 2), the
three are rebuilt from them and must come out equal, and where anything does not fit (a replaced event rather than an
inserted one, a size that changes with depth, a free that no rule explains) `fit` says so with None: the caller
replays the deep model whole. Three depths cannot rule out a rule that holds for them and not deeper (two storages of
one size whose frees swap): the caller checks the first drawn trace against a deeper real one
(experiments/distributed/fits_traces.py).

Events are the replay's ("alloc", key, bytes) / ("free", key, 0) / ("mark", i, 0) (allocator_model.AllocationLog).
Frees in a row are put in the order their storages were made: the order within a run of frees changes neither what is
alive nor what the allocator can give, and a set's order may differ between two replays (batch_line.py)."""

from __future__ import annotations

import difflib
import itertools

from .batch_line import event_shape


def canonical(events: list) -> list:
    """The trace with each run of frees in the order its storages were made (frees of storages made before the trace
    first)."""
    made, out, run, count = {}, [], [], 0
    for event in events:
        if event[0] == "free":
            run.append(event)
            continue
        out += sorted(run, key=lambda e: made.get(e[1], -1))
        run = []
        if event[0] == "alloc":
            made[event[1]], count = count, count + 1
        out.append(event)
    return out + sorted(run, key=lambda e: made.get(e[1], -1))


def _tokens(events: list) -> list[tuple]:
    sizes, out = {}, []
    for kind, key, n in events:
        if kind == "alloc":
            sizes[key] = n
            out.append(("a", n))
        elif kind == "free":
            out.append(("f", sizes.get(key)))
        else:
            out.append(("m", key))
    return out


def _inserts(a: list, b: list) -> list[tuple[int, list]] | None:
    """b as a with blocks inserted: [(position in a, the block's tokens)], or None where b is not that."""
    blocks = []
    for tag, i1, _, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "insert":
            blocks.append((i1, b[j1:j2]))
        elif tag != "equal":
            return None
    return blocks


def _copies(tokens: list, block: list, place: int) -> tuple[int, int]:
    """How many copies of `block` lie right before and right after `place`."""
    size, before, after = len(block), 0, 0
    while place - (before + 1) * size >= 0 and tokens[place - (before + 1) * size : place - before * size] == block:
        before += 1
    while tokens[place + after * size : place + (after + 1) * size] == block:
        after += 1
    return before, after


def _runs(tokens: list, inserts: list) -> list[dict] | None:
    """Each inserted block's run in the shallowest trace: the copies of the block on either side of where it went in
    (the shallow model's own layers), or None where two runs overlap. A block with no copy beside it may be the ends
    of two runs that meet there (one pass over the layers, then another): it is split where each part has copies."""
    runs = []
    for place, block in inserts:
        if any(t[0] == "m" for t in block):
            return None  # a phase that comes with a layer: not a step of alike layers
        before, after = _copies(tokens, block, place)
        if before + after:
            runs.append({"start": place - before * len(block), "block": block, "copies": before + after})
            continue
        splits = []
        for cut in range(1, len(block)):
            left, right = _copies(tokens, block[:cut], place)[0], _copies(tokens, block[cut:], place)[1]
            if left and right:
                splits.append((-(left + right), cut, left, right))
        if not splits:
            runs.append({"start": place, "block": block, "copies": 0})
            continue
        _, cut, left, right = min(splits)
        runs.append({"start": place - left * cut, "block": block[:cut], "copies": left})
        runs.append({"start": place, "block": block[cut:], "copies": right})
    runs.sort(key=lambda r: r["start"])
    for r, s in itertools.pairwise(runs):
        if r["start"] + r["copies"] * len(r["block"]) > s["start"]:
            return None
    return runs


def _layout(runs: list[dict], n: int, length: int) -> list[tuple]:
    """The label of each event of the trace with n more layers: ("fixed", index in the shallowest trace) or ("copy",
    run, copy, offset in the block)."""
    out, i = [], 0
    for k, r in enumerate(runs):
        out += [("fixed", j) for j in range(i, r["start"])]
        size = len(r["block"])
        out += [("copy", k, c, o) for c in range(r["copies"] + n) for o in range(size)]
        i = r["start"] + r["copies"] * size
    return out + [("fixed", j) for j in range(i, length)]


def _targets(events: list, labels: list) -> dict[int, tuple | None]:
    """For each free (by index), the label of the event that made its storage (None: made before the trace)."""
    made, out = {}, {}
    for i, (kind, key, _) in enumerate(events):
        if kind == "alloc":
            made[key] = labels[i]
        elif kind == "free":
            out[i] = made.get(key)
    return out


def _rule(seen: list[tuple[int, int, tuple | None]], runs: list[dict], copies: int):
    """What a free gives back, from what it gave back in the three traces [(layers added, its copy or -1, the
    storage's label)]: a storage outside the runs, or one of a run's copies at a fixed distance from the free's own
    copy in the run's order (`fwd`) or in the reversed order (`rev`), or from the run's first or last copy (a free
    outside the runs), with what it gives back where that copy does not exist, and where the copies nearest one end
    of the free's own run (`copies` of it in the shallowest trace) give back a storage outside the runs instead (the
    last layer's output is the model's, not a next layer's input)."""
    targets = {t for _, _, t in seen}
    if len(targets) == 1 and (next(iter(targets)) is None or next(iter(targets))[0] == "fixed"):
        return ("same", next(iter(targets)))
    inside = [(n, c, t) for n, c, t in seen if t is not None and t[0] == "copy"]
    found = []
    for (run, offset), way in itertools.product(sorted({(t[1], t[3]) for _, _, t in inside}), WAYS):
        shifts = {t[2] - _position(way, n, c, runs[run]["copies"]) for n, c, t in inside if t[1:4:2] == (run, offset)}
        if len(shifts) != 1:
            continue
        shift = next(iter(shifts))
        ends: dict = {}
        usual, odd = [], []
        for n, c, t in seen:
            at = _position(way, n, c, runs[run]["copies"]) + shift
            if 0 <= at < runs[run]["copies"] + n:
                if t == ("copy", run, at, offset):
                    usual.append((n, c))
                elif c < 0:
                    break
                else:
                    odd.append((n, c, _anchors(t, n, runs)))
            else:
                beyond = at if at < 0 else at - runs[run]["copies"] - n
                ends[beyond] = ends.get(beyond, _anchors(t, n, runs)) & _anchors(t, n, runs)
                if not ends[beyond]:
                    break
        else:
            edges = _edges(usual, odd, copies)
            if edges is not None:
                found.append((way, run, offset, shift, _one(ends), edges))
    # The rule that explains most frees by the layers' order: a table of exceptions explains anything at three depths.
    return min(found, key=lambda rule: len(rule[5]) + len(rule[4]), default=None)


def _anchors(target: tuple | None, n: int, runs: list[dict]) -> set:
    """A storage as its place from either end of its run, for a copy (which of the two holds in every trace is the
    rule), or itself."""
    if target is None or target[0] == "fixed":
        return {target}
    _, run, c, offset = target
    return {("start", run, c, offset), ("end", run, c - runs[run]["copies"] - n, offset)}


def _resolve(anchor: tuple | None, n: int, runs: list[dict]) -> tuple | None:
    if anchor is None or anchor[0] == "fixed":
        return anchor
    where, run, c, offset = anchor
    return ("copy", run, c if where == "start" else c + runs[run]["copies"] + n, offset)


def _one(table: dict) -> dict:
    return {k: min(v, key=repr) for k, v in table.items()}


def _edges(usual: list, odd: list, copies: int) -> dict | None:
    """The exceptions [(layers added, copy, its storage's anchors)] as a table keyed by the copy's place from one end
    of its run (from the start: 0, 1, ...; from the end: -1, -2, ...) that holds in all three traces, or None."""
    if not odd:
        return {}
    for key in (lambda n, c: c, lambda n, c: c - copies - n):
        table: dict = {}
        for n, c, anchors in odd:
            table[key(n, c)] = table.get(key(n, c), anchors) & anchors
        if all(table.values()) and not any(key(n, c) in table for n, c in usual):
            return _one(table)
    return None


WAYS = ("fwd", "rev", "first", "last")


def _position(way: str, n: int, c: int, copies: int) -> int:
    return {"fwd": c, "rev": n - c, "first": 0, "last": copies + n - 1}[way]


def _target(rule: tuple, n: int, c: int, runs: list[dict], copies: int) -> tuple | None:
    if rule[0] == "same":
        return rule[1]
    way, run, offset, shift, ends, edges = rule
    for key in (c, c - copies - n):
        if c >= 0 and key in edges:
            return _resolve(edges[key], n, runs)
    at = _position(way, n, c, runs[run]["copies"]) + shift
    size = runs[run]["copies"] + n
    if 0 <= at < size:
        return ("copy", run, at, offset)
    beyond = at if at < 0 else at - size
    if beyond not in ends:
        raise LookupError(f"no storage {beyond} beyond the run's ends")
    return _resolve(ends[beyond], n, runs)


def fit(depths: tuple[int, int, int], traces: list[list]) -> dict | None:
    """The rules that draw the trace at any depth from the traces at three equally spaced depths, or None where they
    do not hold. The spacing is the model's period: 1 layer, or k where every k-th layer is checkpointed; the drawn
    depths are the shallowest plus whole periods."""
    step = depths[1] - depths[0]
    if not (step > 0 and depths[2] - depths[1] == step):
        return None
    samples = [canonical(t) for t in traces]
    tokens = [_tokens(t) for t in samples]
    inserts = _inserts(tokens[0], tokens[1])
    runs = _runs(tokens[0], inserts) if inserts else None
    if runs is None:
        return None
    seen: dict = {}
    for n, (events, toks) in enumerate(zip(samples, tokens, strict=True)):
        labels = _layout(runs, n, len(tokens[0]))
        if [_token(label, tokens[0], runs) for label in labels] != toks:
            return None
        for i, target in _targets(events, labels).items():
            label = labels[i]
            role = label[:2] + label[3:] if label[0] == "copy" else label
            seen.setdefault(role, []).append((n, label[2] if label[0] == "copy" else -1, target))
    rules = {}
    for role, obs in seen.items():
        rules[role] = _rule(obs, runs, runs[role[1]]["copies"] if role[0] == "copy" else 0)
        if rules[role] is None:
            return None
    result = {"depth": depths[0], "step": step, "events": samples[0], "runs": runs, "rules": rules}
    for n, real in enumerate(samples):
        drawn = trace_at_depth(result, depths[0] + n * step)
        if drawn is None or not same(drawn, real):
            return None
    return result


def resized(fit_: dict, events: list) -> dict | None:
    """The fit for the same run at another batch, from the shallowest trace at that batch alone: its storages made
    and freed as in the fit's (so the layers' rules hold), only their sizes others; None where they are not, or a
    run has no copy in the shallowest trace to give its block's sizes."""
    t0 = canonical(events)
    tokens = _tokens(t0)
    if event_shape(t0) != event_shape(fit_["events"]):
        return None
    runs = []
    for r in fit_["runs"]:
        size = len(r["block"])
        block = tokens[r["start"] : r["start"] + size]
        if r["copies"] == 0 or any(
            tokens[r["start"] + c * size : r["start"] + (c + 1) * size] != block for c in range(r["copies"])
        ):
            return None
        runs.append(dict(r, block=block))
    return dict(fit_, events=t0, runs=runs)


def _token(label: tuple, tokens: list, runs: list[dict]) -> tuple:
    return tokens[label[1]] if label[0] == "fixed" else runs[label[1]]["block"][label[3]]


def same(a: list, b: list) -> bool:
    """Whether two traces make and free the same storages in the same order, with the same sizes."""
    sizes = [[n for kind, _, n in t if kind == "alloc"] for t in (a, b)]
    return sizes[0] == sizes[1] and event_shape(canonical(a)) == event_shape(canonical(b))


def trace_at_depth(fit_: dict, depth: int) -> list | None:
    """The trace with `depth` layers (at or above the shallowest sample), or None where a free finds no storage."""
    n, rest = divmod(depth - fit_["depth"], fit_["step"])
    if n < 0 or rest:
        raise ValueError(f"depth: {depth} is not the shallowest sample {fit_['depth']} and a whole number of steps")
    events, runs, rules = fit_["events"], fit_["runs"], fit_["rules"]
    tokens = _tokens(events)
    keys: dict = {}
    out: list = []
    for label in _layout(runs, n, len(events)):
        kind, value = _token(label, tokens, runs)
        if kind == "a":
            keys[label] = len(keys)
            out.append(("alloc", keys[label], value))
        elif kind == "m":
            out.append(("mark", value, 0))
        else:
            role = label[:2] + label[3:] if label[0] == "copy" else label
            try:
                own = runs[label[1]]["copies"] if label[0] == "copy" else 0
                target = _target(rules[role], n, label[2] if label[0] == "copy" else -1, runs, own)
            except LookupError:
                return None
            if target is not None and target not in keys:
                return None
            out.append(("free", ("before", label) if target is None else keys[target], 0))
    return out
