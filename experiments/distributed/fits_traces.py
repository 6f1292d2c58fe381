"""The CUDA allocation traces a "What fits" search reads, one per configuration, kept in the search's cache (a dict):

- a replay of the run (experiments/estimate/replay.py), events kept, with its phase rows;
- the same run with another optimizer implementation: that replay with the implementation's steps spliced in
  (optimizer_alone.py);
- the run of a deep model of alike layers: drawn from replays with 3, 4 and 5 layers (experiments/estimate/
  depth_line.py), checked against a real replay with 7 layers, then at other batches that take the same path from a
  3-layer replay alone; a model whose trace does not follow the layers is replayed whole;
- the run at a larger batch: drawn from the batch line of three small batches (experiments/estimate/batch_line.py),
  checked once against a replay at the first batch the search asks for above them; a line that does not hold is not
  used again.

A search tries a dozen batches per combination; each replay of a full-size model takes a second or more on a CPU (a
32-layer one three), three shallow ones a second, the lines' traces a few milliseconds."""

from __future__ import annotations

import json

from ..core.config import ExperimentConfig
from ..core.errors import CannotPredict
from ..estimate import depth_line
from ..estimate.batch_line import event_shape, line, phase_figures, trace_at
from ..estimate.estimator import cuda_config
from ..estimate.fast_replay import SAMPLES as DEPTHS
from ..estimate.fast_replay import layers_of, replays_whole, with_layers
from ..estimate.replay import replay
from ..estimate.workspaces import uncounted
from .optimizer_alone import parameter_shapes, spliced_trace, splices, step_events

SAMPLES = (2, 3, 4)  # not batch 1: a single sample may take another path (a squeezed dimension)
BLOCK = 512  # the CUDA allocator's rounding, as the tracker counts
CHECK_DEPTH = 7  # two layers past the samples: a rule that skips a layer would show


REPLAYS = ("replays",)  # the cache's count of the replays it made
UNMEASURED = ("unmeasured",)  # the ops whose kernel scratch the traces lack (neither measured nor computed)


def replays_made(cache: dict) -> int:
    """How many replays (whole runs, or an optimizer alone) the cache's traces took; spliced and drawn ones take none."""
    return cache.get(REPLAYS, 0)


def unmeasured_ops(cache: dict) -> list[str]:
    """The ops (aten names) whose kernel scratch is in none of the cache's traces: a convolution's cuDNN workspace
    where the device has not measured it (experiments/estimate/workspaces.py). The traces count none of it."""
    return sorted(cache.get(UNMEASURED, ()))


def _note(r: dict, transients, cache: dict) -> dict:
    ops = {json.loads(sig)["op"] for sig in uncounted(r.get("signatures", ()), transients)}
    cache[UNMEASURED] = cache.get(UNMEASURED, set()) | ops
    return r


def json_key(cfg: ExperimentConfig) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in cfg.to_dict().items()))


def _without(key: tuple, *names: str) -> tuple:
    return tuple(item for item in key if item[0] not in names)


def shapes(cfg: ExperimentConfig, cache: dict) -> list:
    """The trained parameters' shapes and dtypes (optimizer_alone.parameter_shapes), once per model and precision."""
    key = ("shapes", *_without(json_key(cfg), "batch", "accum", "checkpoint", "optimizer_impl"))
    if key not in cache:
        cache[key] = parameter_shapes(cfg)
    return cache[key]


def replayed(cfg: ExperimentConfig, transients, cache: dict, rows: bool = False) -> dict:
    """{"events": cfg's CUDA allocation trace[, "phases": its phase rows]}: a replay of its own, or, where the cache
    holds the trace of the same run with another optimizer implementation, that trace with this implementation's steps
    spliced in (no phase rows). `rows`: the phase rows are wanted."""
    run_cfg = cuda_config(cfg).replace(accum=cfg.accum)
    key = json_key(run_cfg)
    if key in cache and (not rows or "phases" in cache[key]):
        return cache[key]
    same_run = ("run", *_without(key, "optimizer_impl"))
    donor = cache.get(same_run) if splices(run_cfg) and not rows else None
    if donor is not None:
        steps_key = ("steps", *_without(key, "batch", "checkpoint"))
        if steps_key not in cache:
            cache[REPLAYS] = replays_made(cache) + 1
            steps = len(donor["steps"])
            cache[steps_key] = step_events(run_cfg, BLOCK, shapes(run_cfg, cache), steps, transients, memo=cache)
        got = {"events": spliced_trace(donor["events"], donor["steps"], cache[steps_key])}
    else:
        r = _drawn(run_cfg, transients, cache) or _note(
            replay(run_cfg, block=BLOCK, transients=transients, keep_events=True), transients, cache
        )
        cache[REPLAYS] = replays_made(cache) + 1
        got = {"events": r["events"], "phases": r["phases"]}
        if splices(run_cfg):
            steps = [i for i, p in enumerate(r["phases"]) if p["phase"] == "optimizer_step"]
            cache[same_run] = {"events": r["events"], "steps": steps}
    cache[key] = got
    return got


def _at_depth(cfg: ExperimentConfig, layers: int, transients) -> dict:
    return replay(with_layers(cfg, layers), block=BLOCK, transients=transients, keep_events=True)


def drawable(cfg: ExperimentConfig, cache: dict) -> bool:
    """Whether cfg's trace may be drawn from shallow replays: a deep model of alike layers whose drawing has not
    failed for this configuration."""
    run_cfg = cuda_config(cfg).replace(accum=cfg.accum)
    # Without accumulation, deeper than the check's 7 layers, not only where fast_replay draws (16): a search replays a
    # dozen batches, and a 12-layer model's 3-layer replay takes a third of its whole one. With accumulation the
    # search replays one batch (the cheapest answer's) and each micro-batch costs a replay's step: the four shallow
    # replays cost more than the whole one below 16 layers (a 12-layer Qwen2 at accumulation 64: 115 s against 60 s).
    if layers_of(run_cfg) is None:  # not a model of alike layers
        return False
    deep = _depths(run_cfg) is not None if run_cfg.accum == 1 else not replays_whole(run_cfg)
    return deep and cache.get(_family(run_cfg)) is not False


def _family(run_cfg: ExperimentConfig) -> tuple:
    return ("depth", *_without(json_key(run_cfg), "batch"))


def _depths(run_cfg: ExperimentConfig) -> tuple[int, int, int, int] | None:
    """The three sample depths and the check's: 3, 4, 5 and 7 layers, or with every k-th layer checkpointed the same
    in periods of k layers, from the shallowest depth that is the model's own modulo k; None where the check would
    be as deep as the model."""
    period = run_cfg.checkpoint_every if run_cfg.checkpoint != "none" else 1
    layers = layers_of(run_cfg)
    first = DEPTHS[0] + (layers - DEPTHS[0]) % period
    depths = (first, first + period, first + 2 * period, first + (CHECK_DEPTH - DEPTHS[0]) * period)
    return depths if depths[3] < layers else None


def _drawn(run_cfg: ExperimentConfig, transients, cache: dict) -> dict | None:
    """{"events", "phases"} of a deep run drawn from shallow replays, or None where it cannot be. A batch whose 3-layer
    replay makes and frees its storages as an earlier batch's did: from that replay alone, with the earlier fit's rules
    (depth_line.resized); otherwise (the first batch, or another path) from its 3-, 4- and 5-layer replays, the fit
    checked against a real 7-layer replay. A configuration where a fit fails is replayed whole from then on."""
    if not drawable(run_cfg, cache):
        return None
    family = _family(run_cfg)
    depths = _depths(run_cfg)
    if depths is None:
        return None
    shallow = _note(_at_depth(run_cfg, depths[0], transients), transients, cache)
    # A batch may take another path than the first (a single sample squeezes a dimension): each path's fit is kept.
    fits = (depth_line.resized(f, shallow["events"]) for f in cache.get(family, ()))
    fit = next((f for f in fits if f is not None), None)
    if fit is None:
        deeper = [_at_depth(run_cfg, d, transients)["events"] for d in depths[1:3]]
        fit = depth_line.fit(depths[:3], [shallow["events"], *deeper])
        if fit is not None:
            check = depth_line.trace_at_depth(fit, depths[3])
            real = _at_depth(run_cfg, depths[3], transients)["events"]
            fit = fit if check is not None and depth_line.same(check, real) else None
        if fit is None:
            cache[family] = False
            return None
        cache[family] = [*cache.get(family, ()), fit]
    events = depth_line.trace_at_depth(fit, layers_of(run_cfg))
    if events is None:
        return None
    figures = phase_figures(events, BLOCK)
    rows = [dict(r, allocated_bytes=a, peak_bytes=p) for r, (a, p) in zip(shallow["phases"], figures, strict=True)]
    return {"events": events, "phases": rows}


def _line(run_cfg: ExperimentConfig, transients, cache: dict) -> dict | None:
    """The run's batch line, made from the three samples and checked against a replay at run_cfg's batch the first
    time a batch above them is asked for; None where it does not hold."""
    line_key = ("line", *_without(json_key(run_cfg), "batch"))
    if line_key not in cache:
        samples = [replayed(run_cfg.replace(batch=b), transients, cache) for b in SAMPLES]
        fit = line(SAMPLES, [s["events"] for s in samples])
        cache[line_key] = fit and dict(fit, checked=False, rows=samples[0].get("phases"))
    fit = cache[line_key]
    # A line drawn from spliced samples holds where its donor's line held (the splice is exact).
    checked_run = ("checked", *_without(line_key, "optimizer_impl"))
    if fit is not None and not fit["checked"] and (fit["rows"] is not None or checked_run not in cache):
        real = replayed(run_cfg, transients, cache)["events"]
        drawn = trace_at(fit, run_cfg.batch)
        sizes = [[n for kind, _, n in t if kind == "alloc"] for t in (real, drawn)]
        if event_shape(real) != event_shape(drawn) or sizes[0] != sizes[1]:
            cache[line_key] = fit = None
        elif fit["rows"] is not None:
            cache[checked_run] = True
    if fit is not None:
        fit["checked"] = True
    return fit


def _on_line(run_cfg: ExperimentConfig, cache: dict) -> bool:
    """Whether the batch line serves this run: a batch above the samples, no accumulation, and a model the search
    replays whole anyway or draws from shallow replays (a deep one's three full replays would cost more than the
    batches they spare)."""
    return run_cfg.accum == 1 and run_cfg.batch > SAMPLES[-1] and (replays_whole(run_cfg) or drawable(run_cfg, cache))


def events(cfg: ExperimentConfig, transients, cache: dict | None) -> list:
    """cfg's CUDA allocation trace (its batch as it is; the batch line above the samples)."""
    cache = {} if cache is None else cache
    run_cfg = cuda_config(cfg).replace(accum=cfg.accum)
    key = json_key(run_cfg)
    if key not in cache and _on_line(run_cfg, cache):
        fit = _line(run_cfg, transients, cache)
        if fit is not None and key not in cache:
            cache[key] = {"events": trace_at(fit, run_cfg.batch), "line": True}
    return replayed(run_cfg, transients, cache)["events"]


def replayed_events(cfg: ExperimentConfig, transients, cache: dict) -> list:
    """cfg's CUDA allocation trace from a replay at its own batch, never from the batch line: what an answer is
    checked against. The line is affine in the batch and a kernel's scratch need not be (a split reduction's buffer
    of partial sums appears only past some batch, experiments/estimate/reduce_scratch.py)."""
    run_cfg = cuda_config(cfg).replace(accum=cfg.accum)
    key = json_key(run_cfg)
    if cache.get(key, {}).get("line"):
        del cache[key]
    return replayed(run_cfg, transients, cache)["events"]


def phase_rows(cfg: ExperimentConfig, transients, cache: dict) -> list[dict]:
    """cfg's phase rows (phase, step, allocated_bytes, peak_bytes): a replay's, or drawn from the batch line."""
    run_cfg = cuda_config(cfg).replace(accum=cfg.accum)
    fit = _line(run_cfg, transients, cache) if _on_line(run_cfg, cache) else None
    if fit is None or fit["rows"] is None:
        return replayed(run_cfg, transients, cache, rows=True)["phases"]
    figures = phase_figures(trace_at(fit, run_cfg.batch), BLOCK)
    return [
        {"phase": r["phase"], "step": r["step"], "allocated_bytes": a, "peak_bytes": p}
        for r, (a, p) in zip(fit["rows"], figures, strict=True)
    ]


def peak_or_none(cfg: ExperimentConfig, transients, cache: dict) -> int | None:
    """cfg's allocated peak from the traces the search reads, or None where its run cannot be predicted (as an
    estimate's refusal)."""
    try:
        return max(p["peak_bytes"] for p in phase_rows(cfg, transients, cache))
    except CannotPredict:
        return None
