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


def test_a_gpu_step_scales_its_work_not_its_dispatch_by_the_measured_efficiency():
    """Small CNNs on an H100 ran 2.2-3.7 times their roofline in TF32 and bf16: a GPU's measured efficiency of the
    family and precision scales compute + memory; the dispatch (measured as it is) does not move."""
    gpu = {
        "tflops": {"fp32": 50.0, "tf32": 400.0, "bf16": 800.0},
        "bandwidth_gbs": 4000.0,
        "op_us": 25.0,
        "gpu_efficiency": {"cnn": {"bf16": 3.0}},
    }
    step = {"flops": 2e12, "conv_flops": 2e12, "bytes": 4e9, "kernels": 40}
    work_ms = (2e12 / 800e12 + 4e9 / 4000e9) * 1e3  # 3.5 ms
    got = predict_step_ms(step, gpu, "bf16", "cuda", model="cnn")
    assert got["center_ms"] == pytest.approx(3 * work_ms)
    assert (got["low_ms"], got["high_ms"]) == pytest.approx((3 * work_ms * RANGE[0], 3 * work_ms * RANGE[1]))
    assert got["dispatch_ms"] == pytest.approx(40 * 25e-3) and got["bound"] == "compute"
    # Another precision or family of the same GPU was not measured so: its roofline stands.
    assert predict_step_ms(step, gpu, "tf32", "cuda", model="cnn")["center_ms"] == pytest.approx(
        (2e12 / 400e12 + 4e9 / 4000e9) * 1e3
    )
    assert predict_step_ms(step, gpu, "bf16", "cuda", model="mlp")["center_ms"] == pytest.approx(work_ms)
    # A launch-bound step stays all dispatch, however slow its kernels are.
    launch = dict(step, kernels=4000)
    slow = predict_step_ms(launch, gpu, "bf16", "cuda", model="cnn")
    assert slow["center_ms"] == pytest.approx(4000 * 25e-3) and slow["bound"] == "dispatch"
    # The run's tracked steps do the same work: scaled alike.
    run = {"fixed_s": 0.0, "replay_us": 0.0, "tracked_us": 0.0}
    low, _ = predict_run_s(got, 1, 0, dict(gpu, run=run), step["kernels"])
    assert low == pytest.approx(2 * 3 * work_ms / 1e3 * RANGE[0])


def test_the_gpu_efficiency_probe_grows_its_batch_until_the_arithmetic_dominates_within_its_memory():
    """gpu_efficiency.probe_batch on a made-up linear family: work 0.5 ms and peak 100 MiB per 8 samples over
    1 ms and 200 MiB fixed, dispatch 3 ms; fp32 twice bf16's work and peak growth."""
    from experiments.core.units import MIB
    from experiments.estimate import gpu_efficiency

    def predicted(cfg, rates):
        half = cfg.precision in ("bf16", "amp_bf16", "amp_fp16")
        per = 0.5 if half else 1.0
        work = 1.0 + per * cfg.batch / 8
        peak = 200 * MIB + (100 if half else 200) * MIB * cfg.batch // 8
        return {"compute_ms": work, "memory_ms": 0.0, "dispatch_ms": 3.0}, peak

    base = gpu_efficiency.PROBES["cnn"]["batch"]
    assert base == 8
    # The half precisions want work >= 6 ms: 1 + 0.5 k >= 6, k = 10 (fp32's 1 + k >= 6 needs only 5).
    assert gpu_efficiency.probe_batch("cnn", {}, max_peak=10_000 * MIB, predicted=predicted) == 80
    # fp32's peak: 200 + 200 k <= 1,400 MiB, k = 6; the memory decides.
    assert gpu_efficiency.probe_batch("cnn", {}, max_peak=1_400 * MIB, predicted=predicted) == 48
    # Never below the probe's own batch.
    assert gpu_efficiency.probe_batch("cnn", {}, max_peak=MIB, predicted=predicted) == 8


def test_a_gpus_efficiency_is_measured_once_per_gpu_model_and_kept(tmp_path, monkeypatch):
    """About 20 s of a worker's start on an H100: a restarted worker reads the table instead."""
    from experiments.estimate import gpu_efficiency

    calls = []

    def measure(device, rates):
        calls.append(device)
        return {"cnn": {"bf16": 3.0}}

    monkeypatch.setattr(gpu_efficiency, "measure", measure)
    path = tmp_path / "cache" / "gpu-efficiency.json"
    assert gpu_efficiency.cached(torch.device("cpu"), {}, path) == {"cnn": {"bf16": 3.0}}
    assert gpu_efficiency.cached(torch.device("cpu"), {}, path) == {"cnn": {"bf16": 3.0}}
    assert len(calls) == 1
    path.write_text("{broken")  # a half-written table is measured again, not a failed start
    assert gpu_efficiency.cached(torch.device("cpu"), {}, path) == {"cnn": {"bf16": 3.0}} and len(calls) == 2


def test_a_model_of_ones_own_is_timed_as_the_family_its_work_resembles():
    """A preset such as ResNet-50 used to be timed with the MLP's op cost and efficiency (its config's unused
    `model` field): a step whose arithmetic is mostly convolutions is a CNN's, another a transformer's."""
    from experiments.estimate.steptime import family

    assert family("cnn", None, {"flops": 10, "conv_flops": 0}) == "cnn"  # a built-in family is itself
    assert family("mlp", "preset:resnet50", {"flops": 10, "conv_flops": 9}) == "cnn"
    assert family("mlp", "preset:vit-b16", {"flops": 10, "conv_flops": 1}) == "transformer"
    assert family("mlp", "hf:gpt2", {"flops": 10, "conv_flops": 0}) == "transformer"
