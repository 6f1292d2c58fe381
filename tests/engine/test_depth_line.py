"""A deep model's allocation trace drawn from three shallow ones (experiments/estimate/depth_line.py) equals the deep
model's own replay, storage for storage; where the layers' rules do not hold, nothing is drawn (and "What fits" replays
whole). Torch-free tests on synthetic traces, then replays of real architectures, then the search's answers."""

from __future__ import annotations

import pytest

from experiments.core.config import ExperimentConfig
from experiments.core.model_sources import format_overrides
from experiments.distributed import fits_traces
from experiments.distributed.model_fits import what_fits
from experiments.estimate import depth_line
from experiments.estimate.batch_line import phase_figures
from experiments.estimate.estimator import cuda_config, preset_defaults
from experiments.estimate.replay import replay


def synthetic(layers: int, stacked: bool = False, skip_every: int = 0) -> list:
    """A training step of `layers` alike layers as the replay writes it: each layer's weight and bias, a forward that
    keeps each layer's activation and frees the previous layer's output, a backward in reverse that frees them and
    makes the gradients, an update that makes and frees a temporary per parameter, a zero_grad that frees the
    gradients. `stacked`: one storage whose size grows with the depth (a stacked per-layer scalar); `skip_every`:
    every k-th layer keeps its output (layers that are not alike)."""
    out, key = [], iter(range(10**6))

    def alloc(n):
        k = next(key)
        out.append(("alloc", k, n))
        return k

    sizes = [4096, 64] * layers
    for n in sizes:
        alloc(n)  # the parameters
    out.append(("mark", 0, 0))
    x = alloc(1000)
    saved = []
    for i in range(layers):
        saved.append(alloc(3000))
        y = alloc(1000)
        if not (skip_every and i % skip_every == 0):
            out.append(("free", x, 0))
        x = y
    if stacked:
        out.append(("free", alloc(8 * layers), 0))
    out.append(("mark", 1, 0))
    grads = {}
    for i in reversed(range(layers)):
        grads[2 * i], grads[2 * i + 1] = alloc(4096), alloc(64)
        out.append(("free", saved[i], 0))
    out.append(("free", x, 0))
    out.append(("mark", 2, 0))
    for n in sizes:  # an update's temporary per parameter, made and freed
        out.append(("free", alloc(n), 0))
    out.append(("mark", 3, 0))
    out += [("free", grads[i], 0) for i in range(len(sizes))]
    out.append(("mark", 4, 0))
    return out


def test_frees_of_many_storages_of_one_size_are_drawn_exactly_or_not_at_all():
    """Gradients and temporaries of one size freed in one row: which copy a free gives back is ambiguous."""

    def one_size(layers):
        out = [("alloc", i, 4096) for i in range(layers)]  # a parameter a layer, one size
        out += [("alloc", layers + i, 4096) for i in range(layers)]  # their gradients
        out += [("alloc", 2 * layers + i, 4096) for i in range(layers)]  # a foreach op's temporaries
        return out + [("free", k, 0) for k in range(layers, 3 * layers)] + [("mark", 0, 0)]

    def alive(events) -> set:
        """The storages a trace leaves alive: counted here, not by depth_line.same."""
        return {k for kind, k, _ in events if kind == "alloc"} - {k for kind, k, _ in events if kind == "free"}

    # As the search does: a fit that draws the 7-layer trace right is trusted deeper, one that does not is dropped.
    # Each branch is checked against the storages left alive, so a comparison that passes a wrong trace fails here.
    fit = depth_line.fit((3, 4, 5), [one_size(n) for n in (3, 4, 5)])
    assert fit is not None
    checked = depth_line.trace_at_depth(fit, 7)
    if checked is not None and depth_line.same(checked, one_size(7)):
        for layers in (7, 9, 16):
            drawn = depth_line.trace_at_depth(fit, layers)
            assert depth_line.same(drawn, one_size(layers)) and alive(drawn) == alive(one_size(layers)), layers
    else:  # dropped: rightly, the drawn trace frees other copies than the real one does
        assert checked is None or alive(checked) != alive(one_size(7))


def test_a_drawn_trace_equals_the_deep_one_storage_for_storage():
    fit = depth_line.fit((3, 4, 5), [synthetic(n) for n in (3, 4, 5)])
    assert fit is not None
    for layers in (3, 6, 9, 32):
        assert depth_line.same(depth_line.trace_at_depth(fit, layers), synthetic(layers))
    assert not depth_line.same(depth_line.trace_at_depth(fit, 8), synthetic(9))


def test_nothing_is_drawn_where_a_size_grows_with_the_depth():
    assert depth_line.fit((3, 4, 5), [synthetic(n, stacked=True) for n in (3, 4, 5)]) is None


def test_layers_that_are_not_alike_are_drawn_exactly_or_not_at_all():
    for period in (2, 3):
        fit = depth_line.fit((3, 4, 5), [synthetic(n, skip_every=period) for n in (3, 4, 5)])
        drawn = fit and depth_line.trace_at_depth(fit, 12)
        assert drawn is None or depth_line.same(drawn, synthetic(12, skip_every=period))


def test_frees_in_a_row_are_compared_in_any_order():
    a = synthetic(5)
    b = list(a)
    i = next(i for i in range(len(b) - 1) if b[i][0] == b[i + 1][0] == "free")
    b[i], b[i + 1] = b[i + 1], b[i]
    assert b != a and depth_line.same(a, b)
    fit = depth_line.fit((3, 4, 5), [synthetic(3), synthetic(4), b])
    assert fit is not None and depth_line.same(depth_line.trace_at_depth(fit, 7), synthetic(7))


def test_a_depth_between_periods_is_refused():
    fit = depth_line.fit((4, 6, 8), [synthetic(n) for n in (4, 6, 8)])
    assert depth_line.same(depth_line.trace_at_depth(fit, 10), synthetic(10))
    with pytest.raises(ValueError, match="depth"):
        depth_line.trace_at_depth(fit, 9)


def deep(preset: str, layers: int = 16, **levers) -> ExperimentConfig:
    """A preset's shape with `layers` layers (deep enough for the search to draw it) at a short sequence. Not the tiny
    shapes: where most storages have one size, which one a free gives back is ambiguous and nothing is drawn."""
    source = f"preset:{preset}"
    data = {"model_source": source, **preset_defaults(source), "device": "cuda", "seq_len": 128, **levers}
    data["model_overrides"] = format_overrides({"layers": layers})
    return cuda_config(ExperimentConfig.from_dict(data))


CASES = [
    ("llama3-8b", {"precision": "bf16", "batch": 3}),
    ("llama3-8b", {"precision": "amp_bf16", "checkpoint": "per_layer", "batch": 2, "optimizer_impl": "foreach"}),
    ("mistral-7b", {"precision": "fp32", "batch": 2, "accum": 2}),
    ("llama3-8b", {"precision": "bf16", "finetune": "lora", "checkpoint": "per_layer", "batch": 2}),
    ("llama3-8b", {"precision": "bf16", "finetune": "lora", "checkpoint": "per_layer", "checkpoint_every": 3}),
    ("gpt2", {"precision": "amp_bf16", "batch": 2}),
]


@pytest.mark.parametrize(
    "preset,levers", CASES, ids=lambda v: v if isinstance(v, str) else "-".join(map(str, v.values()))
)
def test_a_drawn_deep_run_equals_its_replay_in_every_storage_and_phase(preset, levers):
    cfg = deep(preset, **levers)
    cache: dict = {}
    got = fits_traces._drawn(cfg, None, cache)
    if levers.get("checkpoint_every", 1) == 1:
        assert got is not None, "a model of alike layers is drawn"
    want = replay(cfg, block=512, keep_events=True)
    if got is not None:
        assert depth_line.same(got["events"], want["events"])
        assert [(p["allocated_bytes"], p["peak_bytes"]) for p in got["phases"]] == phase_figures(want["events"], 512)
        # The phase rows the search reads: the replay's own, but for a scalar or two (512 B each) freed between two
        # phases, which the trace counts in the next phase's peak and the replay's row does not (the batch line's
        # rows do the same): never under the replay's.
        for drawn, own in zip(got["phases"], want["phases"], strict=True):
            assert drawn["allocated_bytes"] == own["allocated_bytes"]
            assert 0 <= drawn["peak_bytes"] - own["peak_bytes"] <= 1024
    larger = cfg.replace(batch=cfg.batch + 2 * cfg.accum)  # from its 3-layer replay alone, where it can be
    another = fits_traces._drawn(larger, None, cache)
    if another is not None:
        assert depth_line.same(another["events"], replay(larger, block=512, keep_events=True)["events"])


def test_a_wrong_rule_is_caught_by_the_deeper_check_and_the_run_is_replayed(monkeypatch):
    cfg = deep("llama3-8b", precision="bf16", batch=2)
    honest = depth_line.trace_at_depth

    def one_free_early(fit, depth):
        trace = honest(fit, depth)
        if depth > fit["depth"] + 2:  # right at the samples, wrong past them: what a rule that skips a layer does
            i = max(i for i, e in enumerate(trace) if e[0] == "free")
            trace = trace[:i] + trace[i + 1 :]
        return trace

    monkeypatch.setattr(depth_line, "trace_at_depth", one_free_early)
    cache: dict = {}
    assert fits_traces._drawn(cfg, None, cache) is None
    assert not fits_traces.drawable(cfg, cache)
    got = fits_traces.replayed(cfg, None, cache)
    assert depth_line.same(got["events"], replay(cfg, block=512, keep_events=True)["events"])


def test_the_search_answers_the_same_with_drawn_traces_as_with_replays(monkeypatch):
    cfg = deep("gpt2", 16, precision="bf16", batch=4, seq_len=256)
    capacity = 6 * 2**30
    drawn = what_fits(cfg, capacity, overhead_bytes=0, impls=("fused", "foreach"))
    monkeypatch.setattr(fits_traces, "_drawn", lambda *a: None)
    monkeypatch.setattr(fits_traces, "drawable", lambda *a: False)
    monkeypatch.setattr("experiments.distributed.model_fits.drawable", lambda *a: False)
    replayed = what_fits(cfg, capacity, overhead_bytes=0, impls=("fused", "foreach"))
    keys = ("largest_batch", "largest_batch_expandable", "allocated_batch", "peak_bytes", "peak_at_batch_bytes")
    assert [{k: r[k] for k in keys} for r in drawn["grid"]] == [{k: r[k] for k in keys} for r in replayed["grid"]]
    assert drawn["cheapest"] == replayed["cheapest"]
    assert any(r["largest_batch"] > 4 for r in drawn["grid"]), "the capacity leaves room for the batch line"
