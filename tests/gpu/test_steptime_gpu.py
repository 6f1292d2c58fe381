"""A GPU step's predicted range against the step itself, for CNNs the roofline alone put below their time (on an
H100, TF32 and bf16 CNN steps ran 2.2-3.7 times it): the worker's calibration measures each family's efficiency in
every precision (experiments/estimate/gpu_efficiency.py), and a CNN that is not one of its probes then lands inside
its range."""

import pytest
import torch

from experiments.core.config import PRECISIONS, ExperimentConfig
from experiments.estimate.calibration import calibrate
from experiments.estimate.estimator import estimate
from experiments.estimate.steptime import predict_step_ms
from experiments.measure.run import run_experiment
from tests.gpu.gpu_lock import one_gpu_user  # noqa: F401 - the fixture the marks use

pytestmark = [
    pytest.mark.usefixtures("one_gpu_user"),
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


def test_every_family_is_calibrated_in_every_precision_it_can_run():
    measured = calibrate("cuda")["gpu_efficiency"]
    assert set(measured) == {"mlp", "cnn", "transformer"}
    for family, by_precision in measured.items():
        # A family measured in fewer precisions stayed launch-bound in the others at its memory limit.
        assert set(by_precision) <= set(PRECISIONS) and len(by_precision) >= 3, (family, by_precision)
        assert all(0.2 < v < 20 for v in by_precision.values()), (family, by_precision)


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp32_strict"])
def test_a_cnn_step_lands_inside_its_predicted_range(precision):
    rates = calibrate("cuda")
    cfg = ExperimentConfig(
        model="cnn", layers=5, width=72, batch=112, precision=precision, optimizer="sgd", device="cuda", timing_steps=10
    )
    step = predict_step_ms(estimate(cfg, device_type="cuda")["step"], rates, precision, "cuda", model="cnn")
    measured = run_experiment(cfg)["step_ms"]["median"]
    assert step["low_ms"] <= measured <= step["high_ms"], (measured, step)


def test_a_cnn_preset_is_timed_as_a_cnn_and_lands_inside_its_range():
    """ResNet-50 (a preset: its config's `model` field is the unused default) took the MLP's costs before."""
    from experiments.estimate.estimator import preset_defaults
    from experiments.estimate.steptime import family

    source = "preset:resnet50"
    cfg = ExperimentConfig.from_dict(
        {"model_source": source, **preset_defaults(source), "batch": 32, "device": "cuda", "timing_steps": 10}
    )
    est = estimate(cfg, device_type="cuda")
    assert family(cfg.model, cfg.model_source, est["step"]) == "cnn"
    step = predict_step_ms(est["step"], calibrate("cuda"), cfg.precision, "cuda", model="cnn")
    measured = run_experiment(cfg)["step_ms"]["median"]
    assert step["low_ms"] <= measured <= step["high_ms"], (measured, step)
