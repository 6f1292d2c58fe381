"""What "What fits" does not count, said with its answer: a convolution's cuDNN workspace, measured only on a GPU and
per shape. On an emulated 12 GB card a CNN at 224 px was answered 192 while 181 ran (docs/benchmarks/
fits-boundary.md); the answer is not silently trusted there. Layer norm's backward scratch is computed (norm_scratch),
so a transformer's answer has nothing uncounted, and a measured workspace counts."""

from __future__ import annotations

from experiments import cli
from experiments.core.config import ExperimentConfig
from experiments.core.units import GIB
from experiments.distributed.model_fits import what_fits
from experiments.estimate.estimator import estimate
from tests.engine.cli_output import said

CNN = {"model": "cnn", "layers": 2, "width": 16, "image_size": 32, "batch": 4, "device": "cuda"}
TRANSFORMER = {
    "model": "transformer",
    "layers": 2,
    "width": 64,
    "heads": 2,
    "seq_len": 16,
    "batch": 4,
    "device": "cuda",
}


def test_a_cnn_search_names_the_convolutions_it_does_not_count():
    r = what_fits(ExperimentConfig.from_dict(CNN), GIB, max_batch=64)
    assert r["unmeasured_ops"] == ["convolution", "convolution_backward"]


def test_measured_workspaces_are_counted_and_not_named():
    cfg = ExperimentConfig.from_dict(CNN)
    signatures = estimate(cfg, device_type="cuda")["signatures"]
    # Every signature the search can meet, as if the device had measured it (a batch's own shapes differ).
    table = {}
    for batch in range(1, 65):
        table |= dict.fromkeys(estimate(cfg.replace(batch=batch), device_type="cuda")["signatures"], (0,))
    assert set(signatures) <= set(table)
    r = what_fits(cfg, GIB, max_batch=64, transients=table)
    assert r["unmeasured_ops"] == []


def test_a_transformer_has_nothing_uncounted_layer_norm_scratch_is_computed():
    cfg = ExperimentConfig.from_dict(TRANSFORMER)
    assert what_fits(cfg, GIB, max_batch=64)["unmeasured_ops"] == []
    est = estimate(cfg, device_type="cuda")
    assert est["not_predicted"] == [] and any("native_layer_norm_backward" in s for s in est["unmeasured"])
    assert "cudnn_workspace" in estimate(ExperimentConfig.from_dict(CNN), device_type="cuda")["not_predicted"]


def test_the_command_line_says_what_it_did_not_count(capsys):
    args = ["fits", "--capacity-gib", "1", "--model", "cnn", "--layers", "2", "--width", "16", "--image-size", "32"]
    code = cli.main([*args, "--batch", "4", "--max-batch", "64"])
    out = said(capsys.readouterr().out)
    assert code == 0 and "not counted: the scratch of convolution, convolution_backward" in out
    code = cli.main(
        ["fits", "--capacity-gib", "1", "--layers", "2", "--width", "64", "--batch", "4", "--max-batch", "64"]
    )
    assert code == 0 and "not counted" not in said(capsys.readouterr().out)
