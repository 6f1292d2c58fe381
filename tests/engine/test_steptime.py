"""The step-time and run-duration predictions (experiments/estimate/steptime.py) against hand computations, and the CPU's
measured rates (experiments/estimate/throughput.py)."""

from __future__ import annotations

import pytest
import torch

from experiments.estimate.steptime import CPU_RANGE, RANGE, contention, predict_run_s, predict_step_ms

STEP = {"flops": 2e9, "bytes": 4e8, "kernels": 200}
CPU = {
    "tflops": {"fp32": 0.1, "tf32": 0.1, "bf16": 0.002, "fp16": 0.004},
    "bandwidth_gbs": 10.0,
    "op_us": 20.0,
    "threads": 2,
    "cores": 2,
    "load": 0.0,
}


def test_contention_is_the_share_of_the_cores_relative_to_when_the_rates_were_measured():
    assert contention(CPU, None) == 1.0 and contention(CPU, 0.0) == 1.0
    assert contention(CPU, 2.0) == 2.0  # 2 other runnable threads and the step's 2 on 2 cores: half the time
    assert contention(CPU, 6.0) == 4.0
    assert contention(dict(CPU, load=6.0), 0.0) == 0.25  # measured on a busy machine, run on an idle one
    assert contention({"tflops": {}}, 9.0) == 1.0  # a GPU's rates: no CPU share


def test_a_cpu_step_is_work_over_rates_scaled_by_efficiency_and_load():
    rates = dict(CPU, efficiency={"cnn": 3.0, "amp_fp16": 2.0})
    center_ms = (2e9 / 0.004e12 + 4e8 / 10e9 + 200 * 20e-6) * 1e3  # fp16's own rate, not bf16's
    got = predict_step_ms(STEP, rates, "amp_fp16", "cpu", load=2.0, model="cnn")
    assert got["low_ms"] == pytest.approx(center_ms * 3 * 2 * 2 * CPU_RANGE[0])
    assert got["high_ms"] == pytest.approx(center_ms * 3 * 2 * 2 * CPU_RANGE[1])
    assert predict_step_ms(STEP, rates, "fp32", "cpu", model="mlp")["low_ms"] == pytest.approx(
        (2e9 / 0.1e12 + 4e8 / 10e9 + 200 * 20e-6) * 1e3 * CPU_RANGE[0]
    )


def test_a_gpu_step_ignores_the_cpu_calibration():
    gpu = {"tflops": {"fp32": 50.0, "bf16": 700.0}, "bandwidth_gbs": 4000.0, "op_us": 25.0}
    plain = predict_step_ms(STEP, gpu, "amp_bf16", "cuda")
    assert (
        predict_step_ms(
            STEP, dict(gpu, efficiency={"mlp": 5.0, "amp_bf16": 5.0}), "amp_bf16", "cuda", load=30.0, model="mlp"
        )
        == plain
    )
    assert plain["low_ms"] == pytest.approx(max(200 * 25e-3, (2e9 / 700e12 + 4e8 / 4000e9) * 1e3) * RANGE[0])


def test_a_gpu_step_dispatches_at_its_model_familys_op_cost():
    """Small CNNs on the H200 ran up to 1.6x above their range when every op was costed at a linear layer's."""
    gpu = {
        "tflops": {"fp32": 50.0, "tf32": 400.0},
        "bandwidth_gbs": 4000.0,
        "op_us": 25.0,
        "op_us_by_model": {"cnn": 90.0},
    }
    assert predict_step_ms(STEP, gpu, "fp32", "cuda", model="cnn")["dispatch_ms"] == pytest.approx(200 * 90e-3)
    assert predict_step_ms(STEP, gpu, "fp32", "cuda", model="cnn")["center_ms"] == pytest.approx(200 * 90e-3)
    # A family not measured (a Hugging Face model) and a CPU step keep the plain op cost.
    assert predict_step_ms(STEP, gpu, "fp32", "cuda", model="hf:gpt2")["dispatch_ms"] == pytest.approx(200 * 25e-3)
    cpu = dict(CPU, op_us_by_model={"cnn": 90.0})
    assert predict_step_ms(STEP, cpu, "fp32", "cpu", model="cnn")["dispatch_ms"] == pytest.approx(200 * 20e-3)


def test_a_run_costs_its_fixed_part_its_replay_and_its_tracked_steps():
    """Every run predicted under 1 s used to run past its range: a run is more than its steps."""
    run = {"fixed_s": 0.3, "replay_us": 1000.0, "tracked_us": 50.0, "load": 0.0}
    rates = dict(CPU, run=run)
    step = predict_step_ms(STEP, rates, "fp32", "cpu", model="mlp")
    steps, timed = 3, 5
    work_ms = (2e9 / 0.1e12 + 4e8 / 10e9) * 1e3
    overhead = 0.3 + 200 * (1000 + (steps + 1) * 50) * 1e-6
    center = overhead + ((steps + 1) * work_ms + timed * step["center_ms"]) / 1e3
    low, high = predict_run_s(step, steps, timed, rates, STEP["kernels"])
    assert (low, high) == pytest.approx((center * CPU_RANGE[0], center * CPU_RANGE[1]))
    # A run with next to no work still takes its fixed part.
    tiny = {"flops": 0, "bytes": 0, "kernels": 1}
    low, _ = predict_run_s(predict_step_ms(tiny, rates, "fp32", "cpu"), 2, 0, rates, 1)
    assert low >= CPU_RANGE[0] * 0.3
    # The same run on a machine twice as busy as when the costs were measured: twice the overhead.
    busy_low, _ = predict_run_s(predict_step_ms(tiny, rates, "fp32", "cpu", load=2.0), 2, 0, rates, 1, load=2.0)
    assert busy_low == pytest.approx(2 * low, rel=1e-3)


def test_without_measured_run_costs_the_old_rule_stands():
    step = predict_step_ms(STEP, CPU, "fp32", "cpu")
    assert predict_run_s(step, 3, 5) == pytest.approx((step["low_ms"] * 13.5 / 1e3, step["high_ms"] * 13.5 / 1e3))


def test_every_precision_is_measured_on_a_cpu(monkeypatch):
    """fp16's rate used to be bf16's copied: on some CPUs they differ many times over."""
    from experiments.estimate import throughput

    made = []
    randn = torch.randn

    def spy(*args, **kwargs):
        made.append(kwargs.get("dtype"))
        return randn(*args, **kwargs)

    monkeypatch.setattr(torch, "randn", spy)
    rates = throughput.measure.__wrapped__("cpu")
    assert {torch.float32, torch.bfloat16, torch.float16} <= set(made)
    assert set(rates["tflops"]) == {"fp32", "tf32", "bf16", "fp16"}
    # Significant digits, not decimals: a CPU's half-precision rate (about 4e-4 TFLOP/s here) used to be rounded
    # to 0.0 or 0.001, and a rate of 0 made the prediction fall back to fp32's.
    assert all(v > 0 and v == float(f"{v:.4g}") for v in rates["tflops"].values())
    assert rates["threads"] == torch.get_num_threads() and rates["cores"] >= 1


def test_every_familys_op_probe_runs_and_costs_something():
    """The probes a GPU's per-family op cost is measured with are valid configurations of their family (a CUDA worker
    measures them at its first report; a probe the config rules refused would leave the GPU without rates)."""
    from experiments.estimate.throughput import OP_PROBES, _eager_op_us

    assert set(OP_PROBES) == {"mlp", "cnn", "transformer"}
    for probe in OP_PROBES.values():
        assert 0 < _eager_op_us(torch.device("cpu"), probe) < 10_000
