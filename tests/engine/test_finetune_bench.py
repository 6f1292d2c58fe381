"""The fine-tuning benchmark's plain loop (benchmarks/finetune_methods.py: transformers, peft and bitsandbytes as their
users call them, not the engine's recipe) on the CPU, tiny variants: the engine's estimate of step 2 equals the
loop's own step-2 peak, counted by the tracker. What the H200 run of the same script compares at full size."""

from __future__ import annotations

import pytest

from benchmarks import finetune_methods as bench

CPU_CASES = [c for c, (_p, levers) in bench.CASES.items() if not levers.get("offload_activations")]


@pytest.mark.parametrize("case", CPU_CASES)
def test_the_estimate_equals_a_plain_peft_loop_on_the_cpu(case):
    cfg = bench.config(*bench.CASES[case], tiny=True, device="cpu")
    measured = bench.measure(cfg)
    predicted = bench.predict(cfg, "cpu")
    assert predicted["estimate_peak_bytes"] == measured["measured_peak_bytes"], (case, predicted, measured)


def test_every_method_is_measured_on_two_presets():
    presets = {p for p, _levers in bench.CASES.values()}
    assert len(presets) >= 2
    for levers in bench.METHODS.values():
        assert sum(1 for _p, lv in bench.CASES.values() if lv == levers) == len(presets)
