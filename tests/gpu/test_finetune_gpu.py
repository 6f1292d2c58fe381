"""Fine-tuning on CUDA as a learner's Run does it (the engine's run, experiments/measure/run.py): QLoRA's 4-bit base
loaded as from_pretrained loads it (the allocator warm-up, transformers' load order) against the CPU-only replay and
against the plain transformers/peft/bitsandbytes loop that benchmarks/finetune_methods.py measured on the same GPU
kind (docs/benchmarks/finetune-methods-h100.jsonl). Full size, batch 1, sequence 2048."""

import json
from pathlib import Path

import pytest
import torch

from benchmarks import finetune_methods as bench
from experiments.measure.run import run_experiment
from tests.gpu.gpu_lock import one_gpu_user  # noqa: F401 - the fixture the marks use

pytestmark = [
    pytest.mark.usefixtures("one_gpu_user"),
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

RECORDED = {
    (row := json.loads(line))["case"]: row
    for line in (Path(__file__).resolve().parents[2] / "docs/benchmarks/finetune-methods-h100.jsonl")
    .read_text()
    .splitlines()
}
CASES = ["llama3-8b-qlora-ckpt-all-paged8bit", "mistral-7b-qlora-ckpt-all-paged8bit"]


@pytest.mark.parametrize("case", CASES)
def test_the_engines_qlora_run_is_the_plain_loops_and_the_estimates(case):
    pytest.importorskip("bitsandbytes")
    preset, levers = bench.CASES[case]
    cfg = bench.config(preset, levers, False, "cuda")
    result = run_experiment(cfg, history=False)
    assert result["oom"] is None, result["oom"]
    base = result["baseline_bytes"]
    step2 = max(p["peak_bytes"] for p in result["phases"] if p["step"] == 2) - base
    reserved = max(p["reserved_bytes"] for p in result["phases"])  # the default allocator's reserved only grows
    est = bench.predict(cfg, "cuda")
    row = RECORDED[case]
    print(case, "engine", step2, reserved, "estimate", est["estimate_peak_bytes"], est["estimate_reserved_bytes"])
    print(case, "plain loop", row["measured_peak_bytes"], row["reserved_bytes"], row["device"], row["torch"])
    assert abs(est["estimate_peak_bytes"] / step2 - 1) <= 0.01
    assert abs(est["estimate_reserved_bytes"] / reserved - 1) <= 0.03
    if (row["device"], row["torch"]) == (torch.cuda.get_device_name(), torch.__version__):
        # The engine's load is the plain loop's from_pretrained: the same peak, and the same segments to 1 %.
        assert abs(step2 / row["measured_peak_bytes"] - 1) <= 0.01
        assert abs(reserved / row["reserved_bytes"] - 1) <= 0.01
