"""The engine's run against a plain loop where gradients of one tensor meet (residual connections), on the GPU: with
the tracker's sums in place (experiments/measure/engine_sums.py) the engine's allocated peak is the plain loop's to the
byte, as measured on an H100 on 2026-12-08 (docs/gpu-tests-h100-2026-12-08.txt: ViT-B/16 at batch 64, and the
seed-4711 grid's row 9). Skipped without CUDA.

    python3 -m pytest tests/gpu/test_engine_sums_gpu.py -v
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from experiments.measure import engine_sums
from tests.gpu.gpu_lock import one_gpu_user  # noqa: F401 - the fixture the marks use

pytestmark = [
    pytest.mark.usefixtures("one_gpu_user"),
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

# The two configurations measured equal that day, as they were run.
ROW_9 = {"model": "transformer", "layers": 2, "width": 576, "batch": 8, "seq_len": 64, "precision": "fp32_strict"}
CASES = [
    {"model_source": "preset:vit-b16", "batch": 64, "precision": "amp_bf16", "checkpoint": "per_layer"}
    | {"optimizer_impl": "fused"},
    ROW_9 | {"checkpoint": "segments", "optimizer": "adamw8bit"},
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.get("model_source") or c["model"])
def test_with_sums_in_place_the_engine_allocates_what_a_plain_loop_does(case, monkeypatch):
    from boundary_trial import config_of
    from engine_vs_plain import plain_peak

    from experiments.measure.run import run_experiment

    if case.get("optimizer") == "adamw8bit":
        pytest.importorskip("bitsandbytes")
    monkeypatch.setattr(engine_sums, "ENABLED", True)
    cfg = config_of(json.dumps(case))
    r = run_experiment(cfg)
    assert r["peak_bytes"] - r["baseline_bytes"] == plain_peak(cfg)
