import json

import pytest

from experiments.core.config import ExperimentConfig
from experiments.estimate import workspaces as op_workspace
from experiments.estimate.estimator import estimate
from experiments.jobs.kinds import execute
from experiments.labs.leaks import SCENARIOS, run_leak
from experiments.measure.run import run_experiment
from experiments.training.guard import check_gradients, seed_lambda_forward

BASE = dict(device="cpu", layers=6, width=128, batch=32)
# The guard's tolerances as the lessons state them (relative error of all gradients against strict fp32), pinned
# here: the code's own table and `ok` flag must agree with these, not decide them.
DOCUMENTED = {"fp32": 1e-4, "fp32_strict": 1e-4, "tf32": 1e-2, "amp_fp16": 5e-2, "amp_bf16": 1e-1, "bf16": 2e-1}


@pytest.mark.parametrize(
    "changes",
    [{"checkpoint": "per_layer"}, {"checkpoint": "segments"}, {"accum": 4}, {"checkpoint": "segments", "accum": 2}],
)
def test_checkpointing_and_accumulation_keep_the_gradients(changes):
    r = check_gradients(ExperimentConfig(**BASE, **changes))
    # Only the order of float additions changes: far inside fp32's tolerance.
    assert r["max_rel_diff"] < 1e-6 and r["tolerance"] == DOCUMENTED["fp32"] and r["ok"]


@pytest.mark.parametrize("precision", ["amp_bf16", "amp_fp16"])
def test_amp_gradients_are_within_the_documented_tolerance(precision):
    r = check_gradients(ExperimentConfig(**dict(BASE, layers=20, width=256), precision=precision))
    # Close, but not identical: a real half-precision run.
    assert 0 < r["max_rel_diff"] <= DOCUMENTED[precision] == r["tolerance"] and r["ok"]


def test_the_guard_compares_with_strict_fp32_and_allows_tf32_error_only_where_tf32_runs():
    from experiments.core.tolerance import GRADIENT_TOLERANCE, gradient_tolerance

    assert GRADIENT_TOLERANCE == DOCUMENTED
    cnn = ExperimentConfig(model="cnn", layers=2, width=8, batch=4, image_size=16, device="cpu")
    r = check_gradients(cnn)
    # On a CPU no op uses TF32: PyTorch's fp32 defaults compute exactly what strict fp32 computes.
    assert r["baseline_precision"] == "fp32_strict" and r["max_abs_diff"] == 0 and r["tolerance"] == 1e-4
    # On a GPU a CNN's fp32 convolutions run in TF32 by default; an MLP's fp32 matmuls do not.
    assert (
        gradient_tolerance(cnn, "cuda") == 1e-2
        and gradient_tolerance(cnn.replace(precision="fp32_strict"), "cuda") == 1e-4
    )
    assert gradient_tolerance(cnn.replace(model="mlp", width=64), "cuda") == 1e-4 == gradient_tolerance(cnn, "cpu")


def test_the_syllabus_late_binding_checkpoint_lambda_is_caught():
    r = check_gradients(ExperimentConfig(**BASE, checkpoint="per_layer"), forward=seed_lambda_forward)
    assert not r["ok"] and r["max_rel_diff"] > 0.1


def test_pure_bf16_without_a_strategy_passes_and_a_wrong_gradient_still_fails():
    """Pure bf16 used to draw its own initial weights (other numbers than fp32's from the same seed): an error of
    0.44 against 0.2 for a run with no memory strategy at all. From the baseline's weights it is a rounding error,
    the size AMP's bf16 autocast has; the late-bound checkpoint lambda stays far outside."""
    cfg = ExperimentConfig(device="cpu", layers=4, width=256, batch=64, precision="bf16")
    pure = check_gradients(cfg)
    assert 0 < pure["max_rel_diff"] < DOCUMENTED["bf16"] / 2 and pure["tolerance"] == DOCUMENTED["bf16"], pure
    amp = check_gradients(cfg.replace(precision="amp_bf16"))
    assert pure["max_rel_diff"] < 2 * amp["max_rel_diff"], (pure, amp)
    wrong = check_gradients(
        cfg.replace(layers=6, width=128, batch=32, checkpoint="per_layer"), forward=seed_lambda_forward
    )
    assert not wrong["ok"] and wrong["max_rel_diff"] > 2 * DOCUMENTED["bf16"], wrong


def _growth(scenario):
    return run_leak(scenario, steps=6, device="cpu", batch=32, width=128, layers=2)["growth_bytes_per_step"]


def test_leak_scenarios_grow_as_the_lesson_says():
    g = {s: _growth(s) for s in SCENARIOS}
    act = 32 * 128 * 4
    assert g["fixed"] == 0 and g["no_zero_grad"] == 0
    assert g["cache_outputs"] == act
    assert g["cache_outputs_detached"] == g["cache_outputs"]  # detach shares the storage
    # Whole graphs stay alive: both layers' ReLU outputs (saved for backward) and the loss's own storage.
    assert g["append_loss_no_backward"] == (2 + 1) * act
    # mse_loss allocates its output at the (batch, width) shape and resizes it to 0-dim, so a kept loss keeps B*W
    # floats (on CUDA the same storage, rounded to its block: docs/gpu-results.md); a hand-written mean keeps one.
    assert g["append_loss_after_backward"] == act
    assert g["append_scalar_loss_after_backward"] == 4


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"batch": 1024},
        {"batch": 1024, "accum": 4},
        {"batch": 1024, "checkpoint": "segments"},
        {"batch": 1024, "optimizer": "sgd_momentum"},  # bf16 CPU kernels differ from CUDA ones: checked on the GPU
        {"batch": 1024, "optimizer": "adamw", "optimizer_impl": "for-loop"},
    ],
)
def test_the_cpu_estimate_is_the_cpu_run(changes):
    """On a CPU the replay counts the very storages the run counts: peak, phase and categories, exactly."""
    cfg = ExperimentConfig(
        **dict(
            dict(device="cpu", layers=8, width=256, batch=8, optimizer_impl="foreach", timing_steps=0, steps=2),
            **changes,
        )
    )
    r = run_experiment(cfg, history=False)
    est = estimate(cfg, device_type="cpu")
    assert est["peak_bytes"] == r["peak_bytes"] - r["baseline_bytes"]
    assert est["peak_phase"] == r["peak_phase"]["phase"]
    assert est["categories"] == r["breakdown"] and est["steady"] == r["breakdown_steady"]


def test_replayed_estimate_equals_the_cpu_measurement_on_a_random_grid(grid_seed):
    """The estimate traces the real step on fake tensors: on CPU it must equal the measurement, for any option mix.
    Three configurations per run, drawn from the day's seed (tests/conftest.py), so the days cover the grid."""
    import random

    from benchmarks.estimate_grid import draw
    from benchmarks.reference_estimator import analytic

    rng = random.Random(f"{grid_seed}-estimate-grid")
    checked = 0
    while checked < 3:
        cfg = draw(rng, "cpu")
        if analytic(cfg)["peak_bytes"] > 64 * 2**20:
            continue  # keep CI quick
        measured = run_experiment(cfg)
        est = estimate(cfg, device_type="cpu")
        assert est["method"] == "replay"
        assert est["peak_bytes"] == measured["peak_bytes"], (grid_seed, cfg)
        assert est["peak_phase"] == measured["peak_phase"]["phase"], (grid_seed, cfg)
        checked += 1


def test_cuda_estimate_rounds_to_allocator_blocks_and_names_what_it_cannot_see():
    cfg = ExperimentConfig(model="cnn", layers=2, width=8, batch=2, image_size=16)
    cuda, cpu = estimate(cfg, device_type="cuda"), estimate(cfg, device_type="cpu")
    assert cuda["peak_bytes"] % 512 == 0 and cuda["peak_bytes"] > cpu["peak_bytes"]
    assert "cudnn_workspace" in cuda["not_predicted"] and not cpu["not_predicted"]
    # forward and backward of each of the two convolutions, and the head's bias gradient (a reduction, whose scratch
    # is computed: experiments/estimate/reduce_scratch.py), so only the convolutions wait for the device
    kinds = op_workspace.kinds(cuda["signatures"])
    assert kinds == {"convolution": 2, "convolution_backward": 2, "sum": 1}
    assert op_workspace.kinds(cuda["unmeasured"]) == {"convolution": 2, "convolution_backward": 2}


def test_the_workspace_job_validates_its_input_and_measures_nothing_without_a_gpu():
    sigs = estimate(ExperimentConfig(model="cnn", layers=2, width=8, batch=2, image_size=16), device_type="cuda")
    assert all(op_workspace.is_signature(s) for s in sigs["signatures"])
    for bad in ("x", ["{}"], ['{"op": "mm"}'], None):
        with pytest.raises(ValueError, match="signatures"):
            execute("workspaces", {"signatures": bad})
    assert execute("workspaces", {"signatures": sigs["signatures"]}) == {"measured": 0}


def test_measured_workspaces_land_in_the_peak_at_their_convolution():
    cfg = ExperimentConfig(model="cnn", layers=3, width=8, batch=4, image_size=16, precision="tf32")
    plain = estimate(cfg, device_type="cuda")
    huge = 2**30  # far above every tensor of the step, so the peak sits at whichever convolution comes last
    table = dict.fromkeys(plain["signatures"], huge)
    with_ws = estimate(cfg, device_type="cuda", transients=table)
    assert with_ws["unmeasured"] == [] and with_ws["not_predicted"] == []
    assert plain["peak_bytes"] < with_ws["peak_bytes"] < plain["peak_bytes"] + huge
    assert with_ws["peak_phase"] in ("forward", "backward")
    assert with_ws["categories"]["other"] >= huge  # the workspace is not a tensor: its own category
    one = estimate(cfg, device_type="cuda", transients={plain["signatures"][0]: huge})
    assert one["peak_bytes"] < with_ws["peak_bytes"] and one["peak_phase"] == "forward"
    # the key is the op's shapes, dtypes and cuDNN's TF32 switch. PyTorch's fp32 default lets cuDNN use TF32, as
    # tf32 does: the same convolutions. Strict fp32 turns it off: other algorithms, other signatures.
    fp32 = estimate(cfg.replace(precision="fp32"), device_type="cuda", transients=table)
    assert fp32["signatures"] == plain["signatures"] and fp32["unmeasured"] == []
    strict = estimate(cfg.replace(precision="fp32_strict"), device_type="cuda", transients=table)
    convolutions = [s for s in strict["signatures"] if "convolution" in s]
    assert len(convolutions) == 6 and [s for s in strict["unmeasured"] if "convolution" in s] == convolutions
    assert all(json.loads(s)["tf32"] is False for s in convolutions)
    assert all(json.loads(s)["tf32"] is True for s in plain["signatures"] if "convolution" in s)


def test_predicted_step_time_range_covers_the_recorded_h200_runs():
    """Work from the replay over the H200's measured rates (docs/benchmarks/throughput-h200.json) vs recorded steps."""
    import json
    from pathlib import Path

    from experiments.core.recorded import ROOT
    from experiments.estimate.steptime import predict_step_ms

    rates = json.loads((Path(ROOT).parent / "docs/benchmarks/throughput-h200.json").read_text())["rates"]
    inside = total = 0
    for path in sorted((Path(ROOT) / "h200").glob("*-preset.json")) + sorted(
        (Path(ROOT) / "h200").glob("*-config.json")
    ):
        result = json.loads(path.read_text())["result"]
        cfg = ExperimentConfig.from_dict(result["config"])
        step = predict_step_ms(estimate(cfg, device_type="cuda")["step"], rates, cfg.precision, "cuda")
        total += 1
        inside += step["low_ms"] <= result["step_ms"]["median"] <= step["high_ms"]
    assert total >= 20 and inside >= 0.9 * total, (inside, total)


def test_predicted_compute_takes_convolutions_at_the_tf32_rate_unless_fp32_is_strict():
    from experiments.estimate.steptime import predict_step_ms

    cnn = ExperimentConfig(model="cnn", layers=3, width=16, batch=4, image_size=32)
    step = estimate(cnn, device_type="cuda")["step"]
    mlp = estimate(ExperimentConfig(layers=2, width=64, batch=8), device_type="cuda")["step"]
    assert 0 < step["conv_flops"] < step["flops"] and mlp["conv_flops"] == 0
    rates = {
        "tflops": {"fp32": 50.0, "tf32": 400.0, "bf16": 800.0, "fp16": 800.0},
        "bandwidth_gbs": 4000.0,
        "op_us": 20.0,
    }
    conv, rest = step["conv_flops"], step["flops"] - step["conv_flops"]
    for precision, conv_rate, rest_rate in (("fp32", 400, 50), ("fp32_strict", 50, 50), ("tf32", 400, 400)):
        got = predict_step_ms(step, rates, precision, "cuda")["compute_ms"]
        assert got == pytest.approx((conv / conv_rate + rest / rest_rate) / 1e9), precision


def test_replay_counts_the_flops_the_runner_counts():
    cfg = ExperimentConfig(
        device="cpu",
        model="transformer",
        layers=2,
        width=64,
        heads=4,
        seq_len=32,
        batch=2,
        checkpoint="per_layer",
        timing_steps=0,
    )
    assert estimate(cfg, device_type="cpu")["step"]["flops"] == run_experiment(cfg)["flops_per_step"]


def test_profile_and_guard_refuse_what_would_not_fit():
    from experiments.measure.fits import WouldNotFit
    from experiments.measure.profiling import profile_step

    big = ExperimentConfig(device="cpu", layers=8, width=4096, batch=64, budget_mb=64)
    for check in (profile_step, check_gradients):
        with pytest.raises(WouldNotFit):
            check(big)


def test_leak_runs_refuse_what_would_not_fit_and_the_bound_covers_every_scenario(monkeypatch):
    from experiments.labs import leaks
    from experiments.labs import leaks as leaks_module
    from experiments.measure.fits import WouldNotFit

    bound = leaks.worst_case_bytes(steps=6, batch=64, width=256, layers=3)
    for scenario in SCENARIOS:
        r = run_leak(scenario, steps=6, device="cpu", batch=64, width=256, layers=3)
        assert max(p["allocated_bytes"] for p in r["per_step"]) <= bound, scenario
    monkeypatch.setattr(leaks_module, "cpu_available_bytes", lambda: 2**20)
    with pytest.raises(WouldNotFit):
        run_leak("fixed", steps=6, device="cpu", batch=64, width=256, layers=3)
