"""The replay of a deep Hugging Face model from three shallow ones, where that is exact: every figure of a run with L
alike layers is affine in L once the peak of each phase sits at the same moment, so replays with 3, 4 and 5 layers
give it for any L when the three agree on one line.

Why affine: a layer adds the same storages at the same moments relative to its own ops, in every phase (its
parameters, gradients and optimizer state; its saved activations in forward; its share of backward). Each phase's
allocated bytes and its peak are then base + slope * L. The samples must be collinear in every figure (phase rows,
categories, parameters, the allocator model's per-phase peaks; not `reserved`, which grows in whole segments); if one
is not, the full replay runs. A peak that moves to another moment only past 5 layers (a deep Mistral's backward
peaks at its end, a shallow one's at the loss) is detected from the traces (`_peak_moves`) and also sends it to the
full replay. Not 2, 3, 4: with two layers a checkpointed Llama-8B shape's backward peaks at the loss.

Only architectures whose layers are all alike take this path (HOMOGENEOUS): not ones that mix layer kinds (Gemma's
sliding/global alternation, DeepSeek's dense first layers).
"""

from __future__ import annotations

from ..core.config import ExperimentConfig
from ..core.model_sources import format_overrides, parse_overrides
from ..training.models import spec_for
from .replay import replay

HOMOGENEOUS = {"llama", "mistral", "mixtral", "gpt2", "bert", "vit", "qwen2", "qwen3", "phi3", "gpt_neox", "opt"}
SAMPLES = (3, 4, 5)
MIN_LAYERS = 16


def layers_of(cfg: ExperimentConfig) -> int | None:
    """The layer count of cfg's model where the fast path may apply, else None."""
    if not cfg.model_source:
        return None
    spec = spec_for(cfg)
    if spec.kind != "hf" or spec.name not in HOMOGENEOUS:
        return None
    n = next((getattr(spec.config, k) for k in ("num_hidden_layers", "n_layer") if hasattr(spec.config, k)), None)
    return n if isinstance(n, int) else None


def _figures(r: dict) -> dict[str, int]:
    out = {f"parameters.{k}": r["parameters"][k] for k in ("bytes", "count", "trainable")}
    out["paged"], out["host_peak"] = r["paged_bytes"], r["host_peak_bytes"]
    for i, p in enumerate(r["phases"]):
        out[f"phase{i}.allocated"], out[f"phase{i}.peak"] = p["allocated_bytes"], p["peak_bytes"]
    out.update({f"categories.{k}": v for k, v in r["categories"].items()})
    out.update({f"steady.{k}": v for k, v in r["steady"].items()})
    out.update({f"marks{i}": m["peak_allocated_bytes"] for i, m in enumerate(r["allocator"]["marks"])})
    out.update({f"step.{k}": v for k, v in r["step"].items()})
    return out


def _timelines(events, block: int) -> list[list[int]]:
    """Bytes alive after each allocation and free of the trace, one list per phase (the trace's marks)."""
    live, sizes, phases, cur = 0, {}, [], []
    for kind, key, nbytes in events:
        if kind == "alloc":
            nbytes = -(-nbytes // block) * block
            sizes[key] = nbytes
            live += nbytes
        elif kind == "free":
            live -= sizes.pop(key, 0)
        else:
            phases.append(cur)
            cur = []
            continue
        cur.append(live)
    return phases


def _affine(values: list[int], n: int) -> int | None:
    a, b, c = values
    return b + (n - SAMPLES[1]) * (b - a) if c - b == b - a else None


def _edges(timelines, p: int, n: int) -> tuple[int, ...] | None:
    """The most bytes alive in phase p's first and in its last h events at n layers, or () where the phase has no
    layers in it, None where its trace is not a prefix, L alike segments and a suffix.

    A phase of L layers is a prefix, L alike segments and a suffix; the segments differ by a constant, so the most
    alive moment among the layers is in the first or the last segment: the phase's first and last h events,
    h = (events at 3 layers) - 2 x (events per layer), cover them and are the same events at every L. So the phase's
    peak at any L is the larger of the two windows' maxima, each affine in L."""
    counts = [len(t[p]) for t in timelines]
    seg = counts[1] - counts[0]
    if counts[2] - counts[1] != seg or seg < 0:
        return None
    if seg == 0:
        return ()
    h = counts[0] - 2 * seg
    if h <= 0:
        return None
    edges = tuple(_affine([max(t[p][window]) for t in timelines], n) for window in (slice(0, h), slice(-h, None)))
    return None if None in edges else edges


def _peak_moves(timelines, figs, n: int, names: list[str]) -> int | None:
    """The first forward or backward phase whose peak at n layers may sit at another moment than in the samples:
    one of its trace's edges (`_edges`) would pass the extrapolated peak, or the trace has no such edges."""
    for p, name in enumerate(names):
        if name not in ("forward", "backward"):
            continue
        edges = _edges(timelines, p, n)
        if edges == ():
            continue
        peak = _affine([f[f"phase{p}.peak"] for f in figs], n)
        if edges is None or peak is None or any(e > peak for e in edges):
            return p
    return None


def _edge_peaks(timelines, figs, n: int, names: list[str], at: dict[str, int]) -> dict[int, int] | None:
    """Every forward and backward phase's peak at n layers from its trace's edges (exact where the peak moves past
    the samples), or None where a sample's phase peak is not what its own trace shows (bytes counted outside the
    trace's phase, e.g. before the phase began)."""
    peaks = {}
    for p, name in enumerate(names):
        if name not in ("forward", "backward"):
            continue
        edges = _edges(timelines, p, n)
        if edges is None:
            return None
        before = [f[f"phase{p - 1}.allocated"] if p else 0 for f in figs]
        if any(max([b, *t[p]]) != f[f"phase{p}.peak"] for b, t, f in zip(before, timelines, figs, strict=True)):
            return None
        if edges:
            peaks[p] = max(*edges, at[f"phase{p - 1}.allocated"] if p else 0)
    return peaks


def with_layers(cfg: ExperimentConfig, layers: int) -> ExperimentConfig:
    """cfg with `layers` layers, its other shape overrides kept: a sample of the depth lines."""
    return cfg.replace(model_overrides=format_overrides({**parse_overrides(cfg.model_overrides), "layers": layers}))


def replays_whole(cfg: ExperimentConfig) -> bool:
    """Whether fast_replay replays cfg whole (a model too shallow, or not of alike layers)."""
    n = layers_of(cfg)
    return n is None or n < MIN_LAYERS


def fast_replay(cfg: ExperimentConfig, block: int = 1, transients=None, phases_only: bool = False) -> dict:
    """replay(cfg)'s result, from 3-, 4- and 5-layer replays where that is exact; `path` says which it took. The
    allocator model's figures are often not affine in L (a block reused whole or split): then the full replay.
    `phases_only`: only the phase rows are wanted (what-fits' search); only they must be on the line, and the result
    holds the phase rows and the parameters."""
    if replays_whole(cfg):
        return dict(replay(cfg, block=block, transients=transients), path="full")
    n = layers_of(cfg)
    samples = [
        replay(
            with_layers(cfg, s),
            block=block,
            transients=transients,
            keep_events=True,
        )
        for s in SAMPLES
    ]
    timelines = [_timelines(r.pop("events"), block) for r in samples]
    figs = [_figures(r) for r in samples]
    names = [p["phase"] for p in samples[0]["phases"]]
    moved = _peak_moves(timelines, figs, n, names)

    def on_line(k):
        return figs[2][k] - figs[1][k] == figs[1][k] - figs[0][k]

    # The step's work (FLOPs, kernels) is for the step-time prediction, not the memory: it may leave the line.
    wanted = ("phase", "parameters.") if phases_only else ("",)
    collinear = all(set(f) == set(figs[0]) for f in figs) and all(
        on_line(k) for k in figs[0] if "step." not in k and k.startswith(wanted)
    )
    at = {k: figs[1][k] + (n - SAMPLES[1]) * (figs[1][k] - figs[0][k]) for k in figs[0]}
    # Where a peak moves, the phase rows still follow from the traces' edges; the peak's categories do not.
    peaks = _edge_peaks(timelines, figs, n, names, at) if moved is not None and phases_only and collinear else None
    if (moved is not None and peaks is None) or not collinear:
        why = f"the peak of phase {moved} moves past {SAMPLES[-1]} layers" if moved is not None else "not collinear"
        return dict(replay(cfg, block=block, transients=transients), path=f"full ({why})")
    peaks = peaks or {}
    mid = samples[1]
    phases = [
        dict(p, allocated_bytes=at[f"phase{i}.allocated"], peak_bytes=peaks.get(i, at[f"phase{i}.peak"]))
        for i, p in enumerate(mid["phases"])
    ]
    top = max(phases, key=lambda p: p["peak_bytes"])
    parameters = dict(
        mid["parameters"],
        bytes=at["parameters.bytes"],
        count=at["parameters.count"],
        trainable=at["parameters.trainable"],
    )
    path = f"from {', '.join(map(str, SAMPLES))}-layer replays to {n} layers"
    if moved is not None:
        path += f" (the peak of phase {moved} moves: from its traces' edges)"
    if phases_only:
        return {"phases": phases, "peak_bytes": top["peak_bytes"], "parameters": parameters, "path": path}
    marks = [
        dict(m, peak_allocated_bytes=at[f"marks{i}"], reserved_bytes=None, allocated_bytes=None)
        for i, m in enumerate(mid["allocator"]["marks"])
    ]
    return dict(
        mid,
        phases=phases,
        peak_bytes=top["peak_bytes"],
        peak_phase=top["phase"],
        categories={k: at[f"categories.{k}"] for k in mid["categories"]},
        steady={k: at[f"steady.{k}"] for k in mid["steady"]},
        step={k: at[f"step.{k}"] if on_line(f"step.{k}") else None for k in mid["step"]},
        parameters=parameters,
        paged_bytes=at["paged"],
        host_peak_bytes=at["host_peak"],
        # Reserved memory grows in whole segments (a step function of L): not extrapolated.
        allocator={"marks": marks, "peak_reserved_bytes": None},
        path=path,
    )
