"""Exercise 2's speed grade on the GPU challenge (batch 8192 in 2 GiB): the rounds job the page submits, run on
CUDA, graded by course/grading/ex2.py. The best known choice is the fastest the rounds measured among the fitting
ones; an fp32 choice beside an AMP bf16 one that fits (several times faster at this batch, DESIGN.md) is slower in
every round and not graded fast."""

import pytest
import torch

from course import content
from course.grading import ex2
from experiments.core.config import ExperimentConfig
from experiments.core.rounds import VERDICT_MIN_ROUNDS, paired
from experiments.estimate.estimator import estimate
from experiments.estimate.steptime import predict_step_ms
from experiments.jobs.kinds import execute
from experiments.measure.device import device_info
from tests.gpu.gpu_lock import one_gpu_user  # noqa: F401 - the fixture the marks use

pytestmark = [
    pytest.mark.usefixtures("one_gpu_user"),
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

S = ex2.settings(content.meta("exercise2"))


def _estimate(config: dict, device_type: str) -> dict:
    return estimate(ExperimentConfig.from_dict(config), device_type=device_type)


def test_the_gpu_challenges_speed_grade_is_read_from_rounds_timed_together():
    ch = ex2.challenge(S, "cuda", _estimate)
    rates = device_info("cuda").get("rates")
    step_ms = (lambda est, p: predict_step_ms(est["step"], rates, p, "cuda")["center_ms"]) if rates else None
    short = ex2.shortlist(S, ch["base"], ch["budget"], "cuda", _estimate, step_ms)
    assert short["choices"], "some option of the grid fits 2 GiB by the estimate"
    # An fp32 choice that fits by the estimate: the cheapest in memory of the fp32 options.
    fp32 = [c for c in ex2.grid(S, "cuda") if c["precision"] == "fp32"]
    mine = min(fp32, key=lambda c: _estimate(ex2.config_of(ch["base"], c), "cuda")["peak_bytes"])
    params, roles = ex2.rounds_job(S, ch["base"], mine, short, "cuda")
    assert params["rounds"] >= VERDICT_MIN_ROUNDS
    run = execute("run", ExperimentConfig.from_dict(ex2.run_config(ch["base"], mine)).to_dict())
    guard = execute("guard", ExperimentConfig.from_dict(ex2.run_config(ch["base"], mine)).to_dict())
    rounds = execute("timing_rounds", params)
    a = ex2.assess(S, run, guard, rounds, roles, ch["budget"])
    # The best known choice is the measured fastest of those that fit, by the paired ratio over the baseline.
    medians = {sid: paired(rounds, sid, roles["baseline"])["median"] for sid in a["eligible"]}
    assert a["best"] == min(medians, key=medians.get)
    # Compute-bound at this batch: the predicted step puts AMP bf16 first, and the rounds show fp32 slower.
    assert any(c["choice"]["precision"] == "amp_bf16" for c in short["choices"]), short
    assert a["best"] != roles["candidate"]
    assert a["vs_best"]["verdict"] == "slower" and a["vs_best"]["median"] > 1 + S.speed_slack
    assert not a["checks"]["fast"] and a["score"] < 100
