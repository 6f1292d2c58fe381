"""What fits, for a model of one's own: every largest batch fits and one more does not, by direct replay; the
decomposition it relies on (the optimizer step alone adds what it adds in the whole run); the fast replay from 3, 4
and 5 layers equal to the full replay; per rank across GPUs; the command line's JSON."""

from __future__ import annotations

import json
import random
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.core.config import ExperimentConfig
from experiments.core.units import MIB
from experiments.distributed.model_fits import _Grid, crossing, fits_across, optimizer_extras, what_fits
from experiments.estimate import fast_replay as fr
from experiments.estimate.estimator import estimate_or_refusal, preset_defaults
from experiments.estimate.replay import replay
from tests.engine.cli_output import said

ROOT = Path(__file__).resolve().parents[2]


def tiny(preset: str, **levers) -> ExperimentConfig:
    source = f"preset:{preset}:tiny"
    return ExperimentConfig.from_dict({"model_source": source, "device": "cpu", **preset_defaults(source), **levers})


def test_what_fits_finds_the_largest_batch_of_every_combination_and_the_cheapest():
    cfg = tiny("llama3-8b", batch=128)
    cap = 12 * MIB
    res = what_fits(cfg, cap, "cpu", impls=("fused", "for-loop"), max_batch=256)
    assert len(res["grid"]) == 4
    for row in res["grid"]:
        at = cfg.replace(optimizer_impl=row["optimizer_impl"], checkpoint=row["checkpoint"], batch=row["largest_batch"])
        fits, over = replay(at), replay(at.replace(batch=at.batch + 1))
        assert fits["peak_bytes"] == row["peak_bytes"] <= cap < over["peak_bytes"]
    plain = max(r["largest_batch"] for r in res["grid"] if r["checkpoint"] == "none")
    assert plain < 128 <= max(r["largest_batch"] for r in res["grid"] if r["checkpoint"] == "per_layer")
    # Batch 128 needs accumulation or checkpointing: accumulation recomputes nothing, so it comes first.
    cheapest = res["cheapest"]
    assert cheapest["checkpoint"] == "none" and cheapest["accum"] > 1
    assert 128 // cheapest["accum"] <= plain and cheapest["peak_bytes"] <= cap


@pytest.mark.parametrize("preset,precision,impl", [("llama3-8b", "bf16", "foreach"), ("gpt2", "amp_bf16", "for-loop")])
def test_the_optimizer_alone_adds_what_it_adds_in_the_whole_run(preset, precision, impl):
    cfg = tiny(preset, precision=precision, optimizer_impl=impl)
    rows = replay(cfg, block=512)["phases"]
    whole = [
        p["peak_bytes"] - rows[i - 1]["allocated_bytes"] for i, p in enumerate(rows) if p["phase"] == "optimizer_step"
    ]
    assert whole[0] > 0
    assert optimizer_extras(cfg, 512) == whole
    assert _Grid(cfg, "cuda").extra(precision, impl) == whole


@pytest.mark.parametrize("preset", ["llama3-8b", "mixtral-8x7b"])
def test_the_fast_replay_from_three_four_five_layers_equals_the_full_replay(preset, monkeypatch):
    monkeypatch.setattr(fr, "MIN_LAYERS", 6)
    cfg = tiny(preset, checkpoint="per_layer", model_overrides="layers=9")
    fast, full = fr.fast_replay(cfg, block=512), replay(cfg, block=512)
    assert fast["path"] == "from 3, 4, 5-layer replays to 9 layers"
    assert [(p["allocated_bytes"], p["peak_bytes"]) for p in fast["phases"]] == [
        (p["allocated_bytes"], p["peak_bytes"]) for p in full["phases"]
    ]
    for key in ("peak_bytes", "peak_phase", "categories", "steady"):
        assert fast[key] == full[key], key
    assert fast["parameters"]["count"] == full["parameters"]["count"]
    marks = [m["peak_allocated_bytes"] for m in full["allocator"]["marks"]]
    assert [m["peak_allocated_bytes"] for m in fast["allocator"]["marks"]] == marks


@pytest.mark.parametrize("batch", [1, 3])
def test_the_search_reads_phase_rows_that_equal_the_full_replay_also_where_the_allocator_leaves_the_line(
    batch, monkeypatch
):
    """What-fits' search takes the phase rows only (phases_only): they must be the full replay's, whatever the
    allocator model's per-phase figures do."""
    monkeypatch.setattr(fr, "MIN_LAYERS", 6)
    cfg = tiny("gpt2", batch=batch, model_overrides="layers=9")
    rows = fr.fast_replay(cfg, block=512, phases_only=True)
    full = replay(cfg, block=512)
    assert rows["path"] == "from 3, 4, 5-layer replays to 9 layers"
    assert [(p["allocated_bytes"], p["peak_bytes"]) for p in rows["phases"]] == [
        (p["allocated_bytes"], p["peak_bytes"]) for p in full["phases"]
    ]
    assert rows["peak_bytes"] == full["peak_bytes"] and rows["parameters"]["count"] == full["parameters"]["count"]


@pytest.mark.parametrize(
    "preset,checkpoint,seq,layers",
    [("mistral-7b", "none", 24, 16), ("mistral-7b", "per_layer", 32, 8), ("gpt2", "none", 32, 16)],
)
def test_the_search_reads_exact_phase_rows_where_the_peak_moves_past_the_samples(
    preset, checkpoint, seq, layers, monkeypatch
):
    """At batch 1 and a short sequence each layer's gradients outweigh its activations: backward peaks at the loss
    with 3-5 layers but at its end with more. The search's phase rows then come from the traces' edges, equal to the
    full replay; the whole result (the peak's categories) still takes the full replay."""
    monkeypatch.setattr(fr, "MIN_LAYERS", 6)
    cfg = tiny(preset, checkpoint=checkpoint, batch=1, seq_len=seq, model_overrides=f"layers={layers},vocab=4096")
    rows = fr.fast_replay(cfg, block=512, phases_only=True)
    full = replay(cfg, block=512)
    assert rows["path"].endswith("(the peak of phase 5 moves: from its traces' edges)")
    assert [(p["allocated_bytes"], p["peak_bytes"]) for p in rows["phases"]] == [
        (p["allocated_bytes"], p["peak_bytes"]) for p in full["phases"]
    ]
    assert full["phases"][5]["phase"] == "backward" and rows["peak_bytes"] == full["peak_bytes"]
    if layers == 8:
        assert fr.fast_replay(cfg, block=512)["path"].startswith("full (the peak of phase 5 moves")


def test_the_batch_search_finds_the_crossing_of_two_lines_in_few_replays():
    """A peak against the batch is the larger of two lines (gradients, flat; activations, steep): the search returns
    the largest batch under the capacity, as a scan of every batch does, in at most 12 evaluations, 4 typically."""
    rng = random.Random(7)
    counts = []
    for _ in range(2000):
        g0, g1, a0, a1 = rng.uniform(10, 60), rng.uniform(0, 1), rng.uniform(0, 40), rng.uniform(0.1, 20)
        cap, limit = rng.uniform(20, 200), rng.choice([64, 512, 4096])
        calls = set()

        def peak(b, g0=g0, g1=g1, a0=a0, a1=a1, calls=calls):
            calls.add(b)
            return max(g0 + g1 * b, a0 + a1 * b)

        want = max((b for b in range(1, limit + 1) if max(g0 + g1 * b, a0 + a1 * b) <= cap), default=0)
        assert crossing(peak, cap, limit, a1 * rng.uniform(0.5, 2)) == want
        counts.append(len(calls))
    assert max(counts) <= 12 and statistics.median(counts) <= 4


def _phase(layers: int, act: int, grad: int, loss_peak: int) -> list[int]:
    """A backward of `layers` alike segments: a loss prefix that peaks high, then each layer frees `act` and makes
    `grad` (one event each), then a one-event suffix. Bytes alive after each event."""
    live = layers * act
    out = [live + loss_peak, live]
    for _ in range(layers):
        live += grad
        out.append(live)
        live -= act
        out.append(live)
    return [*out, live]


@pytest.mark.parametrize("grad,moves", [(90, False), (110, True)])
def test_the_fast_replay_sees_a_peak_that_moves_past_its_samples(grad, moves):
    """Activations freed (100 per layer) against gradients made (90 or 110): with 110 the end of backward gains 10 per
    layer on the loss-time peak and passes it past the samples but before 40 layers."""
    timelines = [[_phase(n, 100, grad, 250)] for n in fr.SAMPLES]
    figs = [{"phase0.peak": max(t[0])} for t in timelines]
    assert [f["phase0.peak"] for f in figs] == [550, 650, 750]  # collinear: the loss-time peak in every sample
    assert (fr._peak_moves(timelines, figs, 40, ["backward"]) == 0) is moves


def test_fits_across_gpus_picks_the_fewest_ranks_for_a_model_of_ones_own():
    from experiments.core.config import DistributedConfig
    from experiments.distributed.estimate import estimate_sharded
    from experiments.estimate.estimator import cuda_config

    cfg = tiny("llama3-8b", precision="fp32", optimizer_impl="foreach")
    single = estimate_or_refusal(cfg, device_type="cuda")["peak_bytes"]

    def rank_peak(strategy: str, n: int) -> int:
        return estimate_sharded(DistributedConfig(cuda_config(cfg), strategy=strategy, world_size=n), "cuda")

    # Just over one GPU: two ranks, and of the strategies that fit there the one with the least traffic. DDP's rank
    # holds the whole model and its buckets (more than one GPU), so that is ZeRO-2.
    best = fits_across(cfg, single - 1, max_world_size=4)
    assert (best["world_size"], best["strategy"]) == (2, "fsdp2_zero2")
    assert best["peak_bytes"] == rank_peak("fsdp2_zero2", 2)["peak_bytes"] <= single - 1
    # Where only four ranks of the smallest plan (offload) fit, three do not: the answer is four, not fewer or more.
    four = rank_peak("fsdp2_offload", 4)["peak_bytes"]
    assert rank_peak("fsdp2_offload", 3)["peak_bytes"] > four
    best = fits_across(cfg, four, max_world_size=4)
    assert (best["world_size"], best["strategy"], best["peak_bytes"]) == (4, "fsdp2_offload", four)


def _cli(*args: str) -> subprocess.CompletedProcess:
    out = subprocess.run(
        [sys.executable, "-m", "experiments", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={"PYTHONPATH": f"{ROOT}:{ROOT / 'tests' / 'engine'}", "PATH": "/usr/bin:/bin"},
    )
    out.stderr = said(out.stderr)
    return out


def test_the_command_line_estimates_a_preset_as_json_and_refuses_bad_names_in_one_line():
    out = _cli("estimate", "--model-preset", "gpt2", "--tiny", "--device", "cpu", "--json")
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["predicted"] and r["config"]["model_source"] == "preset:gpt2:tiny" and r["config"]["batch"] == 2
    assert r["peak_bytes"] == replay(tiny("gpt2"))["peak_bytes"]
    bad = _cli("estimate", "--model-type", "lama")
    assert bad.returncode == 2 and bad.stderr.startswith("error: model_source: ") and bad.stderr.count("\n") == 1
    bad = _cli("fits", "--model-preset", "gpt2", "--set", "layers=0", "--capacity-gib", "1")
    assert bad.returncode == 2 and "model_overrides: layers: got '0'" in bad.stderr
    unpredictable = _cli(
        "estimate", "--import", "own_model_toys:data_dependent_shape", "--inputs", "x:float[B,32]", "--device", "cpu"
    )
    assert unpredictable.returncode == 3 and unpredictable.stdout.startswith("cannot be predicted: gate ")
    as_json = _cli(
        "estimate",
        "--import",
        "own_model_toys:data_dependent_shape",
        "--inputs",
        "x:float[B,32]",
        "--device",
        "cpu",
        "--json",
    )
    assert as_json.returncode == 3 and json.loads(as_json.stdout)["predicted"] is False  # as in text mode
    # a callable that makes no model (it needs arguments) is the learner's to fix, in one line, not a traceback
    no_factory = _cli("estimate", "--import", "os:system", "--inputs", "x:float[B,8]", "--device", "cpu")
    assert no_factory.returncode == 2 and no_factory.stderr.count("\n") == 1, no_factory.stderr
    assert no_factory.stderr.startswith("error: import: os:system() raised TypeError")


def test_the_h200_benchmark_measures_its_plain_loop_as_the_replay_predicts_on_the_cpu(tmp_path):
    """benchmarks/model_presets.py's CPU path on a tiny preset: its own plain loop (not the engine's step), counted by
    the engine's tracker, has the replay's steady-state peak; the JSON it writes has the row. (Where the peak is in
    the optimizer step the engine's step holds one more 0-dim tensor, the loss's clone: a few bytes.)"""
    out = tmp_path / "presets.json"
    r = subprocess.run(
        [
            sys.executable,
            "benchmarks/model_presets.py",
            "--device",
            "cpu",
            "--tiny",
            "--only",
            "gpt2-amp-bf16",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    (row,) = json.loads(out.read_text())["rows"]
    assert row["measured_peak_bytes"] == row["estimate_peak_bytes"] > 0 and row["peak_diff_percent"] == 0


def test_what_each_lever_saves_is_two_estimates_apart():
    """Each row's peak at the learner's batch is the replay of that row's levers at that batch, and what it saves is
    its difference from the learner's own levers' (CPU: exact replays, checked against the estimate directly)."""
    cfg = tiny("gpt2", optimizer_impl="foreach", precision="fp32")
    r = what_fits(cfg, 64 * MIB, "cpu", ("fp32", "bf16"))
    yours = estimate_or_refusal(cfg, device_type="cpu")["peak_bytes"]
    assert r["your_peak_bytes"] == yours
    for row in r["grid"]:
        levers = {k: row[k] for k in ("precision", "optimizer_impl", "checkpoint")}
        theirs = estimate_or_refusal(cfg.replace(**levers), device_type="cpu")["peak_bytes"]
        assert row["peak_at_batch_bytes"] == theirs, levers
        assert row["saves_bytes"] == yours - theirs
    own = next(
        x for x in r["grid"] if (x["precision"], x["optimizer_impl"], x["checkpoint"]) == ("fp32", "foreach", "none")
    )
    assert own["saves_bytes"] == 0
    # Pure bf16 halves the weights, their gradients and Adam's state: every bf16 row saves against fp32.
    assert all(x["saves_bytes"] > 0 and x["saves_percent"] > 0 for x in r["grid"] if x["precision"] == "bf16")


def test_a_cheapest_choice_that_cannot_be_predicted_is_passed_over_not_a_crash(monkeypatch):
    """The cheapest answer on CUDA reads the search's own traces; a combination whose run (with accumulation, another
    replay) cannot be predicted is not the answer, as an estimate's refusal was not."""
    from experiments.core.errors import CannotPredict
    from experiments.distributed import fits_traces

    honest = fits_traces.phase_rows

    def refuses_accumulation(cfg, transients, cache):
        if cfg.accum > 1:
            raise CannotPredict({"message": "cannot be predicted: a test's refusal"})
        return honest(cfg, transients, cache)

    monkeypatch.setattr(fits_traces, "phase_rows", refuses_accumulation)
    cfg = tiny("gpt2", batch=128, device="cuda")
    res = what_fits(cfg, 20 * MIB, "cuda", impls=("fused",), overhead_bytes=0)
    largest = max(r["largest_batch"] for r in res["grid"])
    assert 0 < largest < cfg.batch, "the batch needs accumulation on this card"
    assert res["cheapest"] is None or res["cheapest"]["accum"] == 1
