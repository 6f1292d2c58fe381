"""benchmarks/finetune_rounds.py: step-time ratios as paired rounds (each round both sides once, in a drawn order),
and its loop on the CPU with the tiny variant (the H200 recording runs the same code)."""

from __future__ import annotations

import json

from benchmarks import finetune_rounds


def test_each_round_pairs_both_sides_in_a_drawn_order():
    clock = {"a": iter([2.0, 4.0, 6.0, 8.0] * 5), "b": iter([1.0, 2.0, 2.0, 4.0] * 5)}
    r = finetune_rounds.paired(lambda: next(clock["a"]), lambda: next(clock["b"]), rounds=8, warmup=1, seed=3)
    assert r["rounds"] == len(r["ratios"]) == len(r["order"]) == 8
    assert set(r["order"]) == {"ab", "ba"}  # both orders drawn: neither side always runs first
    assert all(abs(x / y - q) < 1e-9 for x, y, q in zip(r["a_ms"], r["b_ms"], r["ratios"], strict=True))
    assert r["lo"] <= r["median"] <= r["hi"]


def test_the_loop_runs_on_a_cpu(tmp_path):
    out = tmp_path / "rounds.json"
    assert finetune_rounds.main(["--device", "cpu", "--tiny", "--rounds", "2", "--warmup", "1", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert set(data["pairs"]) == {"offload_over_plain", "qlora_over_lora"}
    assert all(p["rounds"] == 2 and p["median"] > 0 for p in data["pairs"].values())


def test_offloading_against_its_alternatives_runs_on_a_cpu(tmp_path):
    out = tmp_path / "rounds.json"
    argv = ["--device", "cpu", "--tiny", "--rounds", "2", "--warmup", "1", "--out", str(out)]
    assert finetune_rounds.main([*argv, "--only", "offload_alone", "--only", "offload_vs_ckpt"]) == 0
    pairs = json.loads(out.read_text())["pairs"]
    assert {k: (p["a"], p["b"]) for k, p in pairs.items()} == {
        "offload_alone": ("lora-offload", "lora"),
        "offload_vs_ckpt": ("lora-offload", "lora-ckpt"),
    }
