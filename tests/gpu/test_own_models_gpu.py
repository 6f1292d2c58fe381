"""Models of one's own on CUDA: the CPU-only replay (what a learner without a GPU is shown) against a plain training
loop on the GPU, for the tiny variant of every preset. Full sizes: benchmarks/model_presets.py, docs/."""

import pytest
import torch

from benchmarks.model_presets import CASES, compare
from tests.gpu.gpu_lock import one_gpu_user  # noqa: F401 - the fixture the marks use

pytestmark = [
    pytest.mark.usefixtures("one_gpu_user"),
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

# Open gaps, each measured on the H200 (docs/model-presets-h200.txt); the test fails when one closes, so the list
# stays true. Tiny GPT-2 with checkpointing: 3,482,112 B measured, 2,447,872 B estimated (the replay's checkpointed
# peak equals its plain one; the GPU's is 1 MB higher). Full size: -0.027 %. Not explained yet.
KNOWN_GAPS = {"gpt2-amp-bf16-ckpt"}


def test_the_cpu_replay_is_the_cuda_peak_of_every_tiny_preset():
    """Within 0.5 % of the measured step-2 peak, or 128 KiB for the smallest (the RNG states and one-block tensors a
    tiny model has are a larger share of its peak; the largest such gap measured is 68 KiB, Mixtral's)."""
    rows = compare(list(CASES), tiny=True, device="cuda")
    bad = set()
    for row in rows:
        m, e = row.get("measured_peak_bytes"), row.get("estimate_peak_bytes")
        print(row["case"], m, e, row.get("peak_diff_percent"))
        if not (m and e) or abs(e - m) > max(0.005 * m, 128 * 2**10):
            bad.add(row["case"])
    assert bad == KNOWN_GAPS, {r["case"]: r.get("peak_diff_percent") for r in rows if r["case"] in bad ^ KNOWN_GAPS}


@pytest.mark.parametrize("preset", ["llama3-8b", "mistral-7b"])
def test_a_grouped_query_models_run_counts_its_flops(preset):
    """torch 2.11's FLOP counter refused grouped-query attention shapes: `run --model-preset llama3-8b --tiny --device
    cuda` measured every phase, then failed at its FLOP count (experiments/measure/flops.py)."""
    from experiments.core.config import ExperimentConfig
    from experiments.measure.run import run_experiment

    r = run_experiment(ExperimentConfig(model_source=f"preset:{preset}:tiny", device="cuda", steps=2, timing_steps=2))
    assert r["flops_per_step"] > 0 and r["tflops"] > 0
