"""The traces "What fits" reads without replaying: another optimizer implementation's steps spliced into a run's trace,
and a run's trace at a larger batch drawn from three small ones. Each equals a replay of its own, event for event; the
answers read from them equal the answers of direct replays at the boundary."""

from __future__ import annotations

import pytest

from experiments.core.capacity import RESERVED_MARGIN
from experiments.core.config import ExperimentConfig
from experiments.core.units import MIB
from experiments.distributed import fits_traces
from experiments.distributed.model_fits import largest_that_runs, what_fits
from experiments.estimate.allocator_limit import first_oom, peak_reserved, reserved_through
from experiments.estimate.batch_line import event_shape, line, phase_figures, trace_at
from experiments.estimate.estimator import cuda_config, preset_defaults
from experiments.estimate.fast_replay import with_layers
from experiments.estimate.reduce_scratch import Buffer, buffers, sum_scratch
from experiments.estimate.replay import replay


def tiny(preset: str, **levers) -> ExperimentConfig:
    source = f"preset:{preset}:tiny"
    data = {"model_source": source, **preset_defaults(source), "device": "cuda", **levers}
    return cuda_config(ExperimentConfig.from_dict(data))


def real(cfg: ExperimentConfig) -> dict:
    return replay(cfg, block=512, keep_events=True)


def until_last_mark(events: list) -> list:
    """The trace up to the end of the last phase (the run's teardown after it frees in its own order)."""
    last = max(i for i, e in enumerate(events) if e[0] == "mark")
    return event_shape(events[: last + 1])


def sizes(events: list) -> list[int]:
    return [n for kind, _, n in events if kind == "alloc"]


@pytest.mark.parametrize(
    "preset,levers",
    [
        ("gpt2", {"precision": "bf16"}),
        ("llama3-8b", {"precision": "amp_bf16", "checkpoint": "per_layer"}),
        ("bert-base", {"precision": "fp32", "optimizer": "sgd"}),
    ],
)
def test_a_spliced_implementation_equals_its_own_replay(preset, levers):
    cache = {}
    impls = ("foreach", "for-loop") if levers.get("optimizer") == "sgd" else ("fused", "foreach", "for-loop")
    first = tiny(preset, batch=3, optimizer_impl=impls[0], **levers)
    fits_traces.replayed(first, None, cache)
    for impl in impls[1:]:
        cfg = first.replace(optimizer_impl=impl)
        got = fits_traces.replayed(cfg, None, cache)
        assert "phases" not in got  # spliced, not replayed
        want = real(cfg)["events"]
        assert until_last_mark(got["events"]) == until_last_mark(want)
        assert sizes(got["events"])[: len(sizes(want))] == sizes(want)[: len(sizes(got["events"]))]
        assert peak_reserved(got["events"]) == peak_reserved(want)
        for fraction in (0.8, 0.95, 1.0):
            limit = int(peak_reserved(want) * fraction)
            assert (first_oom(got["events"], limit, False, release=False) is None) == (
                first_oom(want, limit, False, release=False) is None
            )


@pytest.mark.parametrize(
    "preset,levers",
    [("gpt2", {"precision": "amp_bf16"}), ("vit-b16", {"precision": "bf16", "checkpoint": "per_layer"})],
)
def test_the_batch_line_draws_the_trace_a_replay_makes(preset, levers):
    cfg = tiny(preset, **levers)
    samples = [real(cfg.replace(batch=b))["events"] for b in (2, 3, 4)]
    fit = line((2, 3, 4), samples)
    assert fit is not None
    at = real(cfg.replace(batch=11))
    drawn = trace_at(fit, 11)
    assert event_shape(drawn) == event_shape(at["events"]) and sizes(drawn) == sizes(at["events"])
    figures = phase_figures(drawn, 512)
    rows = at["phases"]
    # What the search reads: each optimizer step's allocated-before, and every other phase's peak.
    for i, row in enumerate(rows):
        if row["phase"] == "optimizer_step":
            assert figures[i - 1][0] == rows[i - 1]["allocated_bytes"]
        elif row["phase"] != "zero_grad":
            assert figures[i] == (row["allocated_bytes"], row["peak_bytes"])
    with pytest.raises(ValueError, match="batch"):
        trace_at(fit, 1)


def test_a_line_that_does_not_hold_is_refused():
    a = [("alloc", 1, 100), ("alloc", 2, 10), ("free", 1, 0), ("mark", 1, 0)]
    grow = [[("alloc", 1, 100 + 10 * b), *a[1:]] for b in (2, 3, 4)]
    assert line((2, 3, 4), grow)["slopes"] == [10, 0]
    squares = [[("alloc", 1, b * b), *a[1:]] for b in (2, 3, 4)]
    assert line((2, 3, 4), squares) is None  # not on a line
    other_path = [grow[0], grow[1], [*grow[2][:2], ("alloc", 3, 5), *grow[2][2:]]]
    assert line((2, 3, 4), other_path) is None  # another event at one batch
    reordered = [grow[0], grow[1], [grow[2][1], grow[2][0], *grow[2][2:]]]
    assert line((2, 3, 4), reordered) is None
    assert line((2, 3, 5), grow) is None  # samples not equally spaced


@pytest.mark.parametrize("source,batches", [("preset:gpt2", (9, 22, 40)), ("preset:bert-base", (40, 100, 181))])
def test_a_split_sums_buffer_is_computed_again_at_each_batch_of_the_line(source, batches):
    # Bias gradients at seq 1024 (GPT-2) and 512 (BERT): their sums' buffers grow with the batch until every SM has
    # its share (GPT-2: batch 22 and up), so they are not on the line the tensors are; drawn as plain sizes the trace
    # is wrong. BERT's decoder bias (30522 outputs) splits from batch 4 on and passes 32-bit indexing by batch 100.
    full = ExperimentConfig.from_dict({"model_source": source, **preset_defaults(source), "device": "cuda"})
    cfg = with_layers(cuda_config(full), 1)
    samples = [real(cfg.replace(batch=b))["events"] for b in (2, 3, 4)]
    assert all(any(isinstance(n, Buffer) for _, _, n in s) for s in samples)
    fit = line((2, 3, 4), samples)
    plain = line((2, 3, 4), [[(kind, key, int(n)) for kind, key, n in s] for s in samples])
    for batch in batches:
        want = real(cfg.replace(batch=batch))["events"]
        drawn = trace_at(fit, batch)
        assert event_shape(drawn) == event_shape(want) and sizes(drawn) == sizes(want)
        assert plain is None or sizes(trace_at(plain, batch)) != sizes(want)


def test_a_losss_own_buffer_and_its_means_are_drawn_at_each_batch_of_the_line():
    # The MLP's mse_loss: its elementwise loss grows with the batch (on the line), the mean's partial sums only until
    # every SM has its share (computed again at each batch).
    cfg = cuda_config(
        ExperimentConfig(device="cuda", layers=2, width=384, precision="amp_bf16", checkpoint="per_layer")
    )
    samples = [real(cfg.replace(batch=b))["events"] for b in (2, 3, 4)]
    fit = line((2, 3, 4), samples)
    for batch in (64, 688, 5000):
        want = real(cfg.replace(batch=batch))["events"]
        scratch = [n for kind, key, n in want if kind == "alloc" and isinstance(key, int) and key < 0]
        assert batch * 384 * 4 in scratch  # the loss's own [batch, width] fp32 buffer, held while the op runs
        drawn = trace_at(fit, batch)
        assert event_shape(drawn) == event_shape(want) and sizes(drawn) == sizes(want)


def test_a_sums_place_on_the_line_holds_where_it_does_not_split_and_goes_where_the_replay_has_none():
    def trace(rows: int) -> list:
        made = buffers([rows, 768], [768, 1], 4, [0], 4, True)
        held = [("alloc", -1 - i, n) for i, n in enumerate(made)] + [("free", -1 - i, 0) for i in range(len(made))]
        return [("alloc", 1, 100 * rows), *held, ("free", 1, 0), ("mark", 1, 0)]

    shrinking = {b: 8192 - 2560 * (b - 2) for b in (2, 3, 4, 5)}  # 512 rows at 5: the sum does not split
    fit = line((2, 3, 4), [trace(shrinking[b]) for b in (2, 3, 4)])
    assert sum_scratch([512, 768], [768, 1], 4, [0], 4, True) == ()
    assert trace_at(fit, 5) == trace(512) and sizes(trace(512)) == [51200, 0, 0]
    assert trace_at(fit, 3) == trace(shrinking[3])
    # Past 32-bit indexing the replay holds no buffer (reduce_scratch does not cover it), and neither does the line.
    fit = line((2, 3, 4), [trace(100_000 * b) for b in (2, 3, 4)])
    assert buffers([800_000, 768], [768, 1], 4, [0], 4, True) == ()
    assert trace_at(fit, 8) == trace(800_000) == [("alloc", 1, 80_000_000), ("free", 1, 0), ("mark", 1, 0)]


def test_a_line_that_fails_its_check_is_not_used(monkeypatch):
    cfg = tiny("gpt2", precision="bf16", batch=9)
    cache = {}
    bent = fits_traces.line

    def wrong(batches, traces):  # a line one byte off in its first activation's slope
        fit = bent(batches, traces)
        i = next(i for i, s in enumerate(fit["slopes"]) if s)
        fit["slopes"][i] += 1
        return fit

    monkeypatch.setattr(fits_traces, "line", wrong)
    got = fits_traces.events(cfg, None, cache)
    assert sizes(got) == sizes(real(cfg)["events"])
    again, want = fits_traces.events(cfg.replace(batch=12), None, cache), real(cfg.replace(batch=12))["events"]
    assert event_shape(again) == event_shape(want) and sizes(again) == sizes(want)
    assert cache[("line", *fits_traces._without(fits_traces.json_key(cfg), "batch"))] is None


@pytest.mark.parametrize("expandable", [False, True])
def test_the_largest_batch_that_runs_equals_direct_replays_at_the_boundary(expandable):
    cfg = tiny("gpt2", precision="bf16", optimizer_impl="foreach")
    card = 160 * MIB
    got = largest_that_runs(cfg, card, 0, expandable)["largest_batch"]
    assert got > 4  # on the line, above the samples
    limit = int(card / (1 + RESERVED_MARGIN))

    def runs(b):
        ev = real(cfg.replace(batch=b))["events"]
        if expandable:
            return first_oom(ev, limit, True, release=True) is None
        # The default allocator gives its cached segments back at the card and keeps the margin on what stays.
        return reserved_through(ev, card) is not None and reserved_through(ev, card) <= limit

    assert runs(got) and not runs(got + 1)


def test_every_implementation_answers_as_its_own_search_would():
    cfg = tiny("llama3-8b", precision="bf16", batch=8)
    res = what_fits(cfg, 200 * MIB, "cuda", overhead_bytes=0)
    for row in res["grid"]:
        alone = cfg.replace(optimizer_impl=row["optimizer_impl"], checkpoint=row["checkpoint"])
        for key, expandable in (("largest_batch", False), ("largest_batch_expandable", True)):
            assert row[key] == largest_that_runs(alone, 200 * MIB, 0, expandable)["largest_batch"]
