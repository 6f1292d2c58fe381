"""`fits --measure`: the largest batch confirmed by real trials. The search from the estimate's answer (with fake
trials: it finds the boundary from any start, spends two trials where the estimate is right, and stops on a trial
that failed for another reason than memory), the figures of the first trial reused, and the refusals. The trials
themselves need a GPU: tests/gpu/test_fits_measure_gpu.py."""

from __future__ import annotations

import pytest
import torch

from experiments import cli_measure
from experiments.measure import boundary
from tests.engine.test_cli_worker import _cli

BOUNDARY = 37


def counted(limit: int = BOUNDARY, broken: int | None = None):
    asked: list[int] = []

    def runs(batch: int):
        asked.append(batch)
        return None if batch == broken else batch <= limit

    return runs, asked


@pytest.mark.parametrize("start", [1, 2, 20, 36, 37, 38, 39, 100, 5000])
def test_the_search_finds_the_boundary_from_any_start(start):
    runs, asked = counted()
    assert boundary.largest_from(runs, start, 65536) == BOUNDARY
    assert BOUNDARY in asked and BOUNDARY + 1 in asked
    assert len(asked) == len(set(asked))  # no trial twice


def test_a_right_estimate_costs_two_trials():
    runs, asked = counted()
    assert boundary.largest_from(runs, BOUNDARY, 65536) == BOUNDARY
    assert asked == [BOUNDARY, BOUNDARY + 1]


def test_nothing_runs_and_everything_runs():
    runs, _ = counted(limit=0)
    assert boundary.largest_from(runs, 9, 65536) == 0
    runs, asked = counted(limit=10**9)
    assert boundary.largest_from(runs, 9, 50) == 50
    assert max(asked) == 50  # never past the largest batch searched


@pytest.mark.parametrize("broken", [BOUNDARY, BOUNDARY + 1, 36])
def test_a_trial_that_failed_for_another_reason_ends_the_search_with_none(broken):
    runs, asked = counted(broken=broken)
    assert boundary.largest_from(runs, broken, 65536) is None
    assert asked[-1] == broken


def test_the_first_trial_measures_what_the_process_holds_outside_the_allocator_and_the_others_reuse_it(monkeypatch):
    given = []

    def fake(config, card_bytes, expandable, outside):
        given.append((config["batch"], outside))
        return {
            "ran": config["batch"] <= 5,
            "oom": None if config["batch"] <= 5 else "CUDA out of memory",
            "outside_start_bytes": 100,
            "outside_end_bytes": 120,
            "held_bytes": 10 * config["batch"],
            "seconds": 0.1,
        }

    monkeypatch.setattr(boundary, "run_trial", fake)
    lines: list[str] = []
    m = boundary.measure_largest({"batch": 1}, 2**30, 4, False, 65536, lines.append)
    assert m["largest_batch"] == 5
    assert given[0] == (4, None) and all(o == {"start": 100, "end": 120} for _, o in given[1:])
    assert [t["batch"] for t in m["trials"]] == [4, 5, 6, 7]  # 5 ran, so the step doubled to 7, then 6 between
    assert lines[-1].startswith("  batch 6: out of memory (CUDA out of memory)")


def test_the_summary_names_the_measured_batch_beside_the_estimate(capsys):
    m = {
        "device": "NVIDIA H200",
        "emulated": True,
        "default": {
            "estimate": 9,
            "largest_batch": 8,
            "trials": [{"batch": 8, "ran": True}, {"batch": 9, "ran": False}, {"batch": 7, "ran": True}],
        },
    }
    cli_measure.print_measured(m)
    assert capsys.readouterr().out == (
        "measured (default allocator, NVIDIA H200, the card emulated): largest batch 8 (the estimate: 9); "
        "ran at 7, 8; did not run at 9\n"
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal of a machine without a GPU")
def test_measure_without_a_gpu_is_one_line_naming_the_field(capsys):
    code, out, err = _cli(capsys, "fits", "--card", "rtx-4090-24gb", "--measure")
    assert code == 2 and out == ""
    assert err == "error: measure: --measure runs real trials and needs a GPU here\n"


@pytest.mark.parametrize(
    "extra", [["--methods", "--model-preset", "gpt2"], ["--across", "2"], ["--device-type", "cpu"]]
)
def test_measure_with_what_it_cannot_confirm_is_refused_before_any_replay(capsys, extra):
    code, out, err = _cli(capsys, "fits", "--capacity-gib", "24", "--measure", *extra)
    assert code == 2 and out == ""
    assert err.startswith("error: measure: --measure confirms the largest batch") and err.count("\n") == 1


def test_no_trial_that_reached_the_gpu_is_one_line_with_the_trials_reason(monkeypatch):
    too_large = "card_bytes: 200 is more than this GPU's 100 bytes; it cannot be emulated here"
    monkeypatch.setattr(boundary, "run_trial", lambda *a: {"ran": None, "error": too_large})
    from experiments.core.config import ExperimentConfig
    from experiments.core.errors import ConfigError

    cfg = ExperimentConfig.from_dict({"precision": "fp32", "optimizer_impl": "foreach", "checkpoint": "none"})
    result = {
        "capacity_bytes": 200,
        "grid": [
            {
                "precision": "fp32",
                "optimizer_impl": "foreach",
                "checkpoint": "none",
                "largest_batch": 4,
                "largest_batch_expandable": 4,
            }
        ],
    }

    class Args:
        json, max_batch = True, 64

    with pytest.raises(ConfigError, match=f"^measure: no trial ran: {too_large}"):
        cli_measure.measure(result, cfg, Args())


def test_a_trial_past_the_card_without_an_error_is_said_to_be_so_not_called_out_of_memory():
    t = {"batch": 144, "ran": False, "oom": None, "held_bytes": 8_328_642_560, "seconds": 8.0}
    assert boundary.trial_line(t, 8_321_499_136) == (
        "  batch 144: did not run, held 7.76 GiB, more than the card's 7.75 GiB"
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="the child's answer on a machine without a GPU")
def test_a_trial_that_cannot_start_is_one_line_from_its_own_process():
    """The real child process (python -m experiments.measure.boundary): where it cannot run (no GPU here) the trial is
    neither a run nor an out-of-memory failure, and says why in one line."""
    r = boundary.run_trial({"batch": 1}, 2**30, False, None)
    assert r["ran"] is None and r["error"] and "\n" not in r["error"]


def test_levers_the_grid_does_not_search_are_measured_from_their_own_answer(monkeypatch):
    """Checkpointing in segments is no row of the grid: the trials start from the same search for the learner's own
    configuration (here on a CPU with a fake trial: the start is what the search answers)."""
    from experiments.core.config import ExperimentConfig
    from experiments.distributed.model_fits import largest_that_runs

    cfg = ExperimentConfig.from_dict(
        {"layers": 4, "width": 256, "batch": 8, "checkpoint": "segments", "segments": 2, "optimizer_impl": "foreach"}
    )
    card, over = 64 * 2**20, 8 * 2**20
    result = {"capacity_bytes": card, "overhead_bytes": over, "grid": []}
    starts = []

    def fake(config, card_bytes, expandable, outside):
        starts.append((config["batch"], expandable, config["checkpoint"], config["segments"]))
        return {"ran": False, "oom": "x", "outside_start_bytes": 1, "outside_end_bytes": 1, "held_bytes": 0}

    monkeypatch.setattr(boundary, "run_trial", fake)

    class Args:
        json, max_batch = True, 64

    from experiments.core.errors import ConfigError

    with pytest.raises(ConfigError, match="^measure: no trial ran"):  # the fake trials name no GPU
        cli_measure.measure(result, cfg, Args())
    from experiments.estimate.estimator import cuda_config

    want = largest_that_runs(cuda_config(cfg), card, over)["largest_batch"]
    assert starts[0] == (min(max(1, want), 64), False, "segments", 2)
