"""What a fine-tuning lever costs in step time, as paired rounds (DESIGN.md: a time ratio is never one pair of runs):
in each round both sides of a pair take one step each, in an order drawn per round, and the round's ratio is the one
side's step time over the other's. The median ratio and its spread over the rounds are what lesson 8 may quote.

Pairs, on one model at full size (batch 1, seq 2048, pure bf16), written as benchmarks/finetune_methods.py writes the
loop (peft, bitsandbytes, transformers' own checkpointing):
- offload: LoRA with checkpointing, each step with and without `save_on_cpu(pin_memory=True)` around the forward, on
  the same model and optimizer (the lever is a context, so both sides share everything else);
- qlora: LoRA with checkpointing on the bf16 base against QLoRA with checkpointing (two models side by side, 30 GiB);
- offload_alone: LoRA without checkpointing, each step with and without offloading (the same model);
- offload_vs_ckpt: the two ways to the same device memory, LoRA offloading without checkpointing against LoRA
  checkpointing without offloading (two models side by side, 32 GiB of weights).

    python benchmarks/finetune_rounds.py --out lessons/finetune/h200_rounds.json       # on the GPU
    python benchmarks/finetune_rounds.py --device cpu --tiny --rounds 3 --out x.json   # the same loop on a CPU
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from finetune_methods import build, config, optimizer, step  # noqa: E402 - after the path

PRESET = "llama3-8b"
LORA_CKPT = {"finetune": "lora", "checkpoint": "per_layer"}
LORA = {"finetune": "lora"}
QLORA_CKPT = {"finetune": "qlora", "checkpoint": "per_layer"}


def _side(levers: dict, tiny: bool, device: str):
    """A model, its optimizer and its batch, ready for steps: (model, optimizer, input ids)."""
    import torch

    cfg = config(PRESET, levers, tiny, device)
    dev = torch.device(cfg.device)
    torch.manual_seed(cfg.seed)
    model, vocab = build(cfg, dev)
    opt = optimizer(cfg, model.parameters())
    ids = torch.randint(0, vocab, (cfg.batch, cfg.seq_len), generator=torch.Generator().manual_seed(1)).to(dev)
    return model, opt, ids


def _step(side, offload: bool, device: str) -> float:
    """One training step's wall time in ms, the device synchronised before and after."""
    import torch

    model, opt, ids = side
    cuda = device == "cuda"
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    # Pinned host memory needs a GPU; on a CPU the copies are plain ones (the loop's shape, not its speed).
    step(model, opt, ids, torch.autograd.graph.save_on_cpu(pin_memory=cuda) if offload else None)
    if cuda:
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1000


def paired(a, b, rounds: int, warmup: int, seed: int) -> dict:
    """`a()` and `b()` each time one step; per round both run, in an order drawn from `seed`. The ratios are a/b."""
    for _ in range(warmup):
        a(), b()
    rng = random.Random(seed)
    a_ms, b_ms, order = [], [], []
    for _ in range(rounds):
        first = rng.random() < 0.5
        order.append("ab" if first else "ba")
        if first:
            a_ms.append(a())
            b_ms.append(b())
        else:
            b_ms.append(b())
            a_ms.append(a())
    ratios = [x / y for x, y in zip(a_ms, b_ms, strict=True)]
    return {
        "a_ms": [round(x, 3) for x in a_ms],
        "b_ms": [round(x, 3) for x in b_ms],
        "order": order,
        "ratios": [round(r, 4) for r in ratios],
        "median": round(statistics.median(ratios), 4),
        "lo": round(min(ratios), 4),
        "hi": round(max(ratios), 4),
        "rounds": rounds,
    }


def main(argv=None) -> int:
    import torch

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--tiny", action="store_true", help="the preset's CPU-sized variant")
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--seed", type=int, default=8)
    p.add_argument("--only", choices=("offload", "qlora", "offload_alone", "offload_vs_ckpt"), action="append")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    pairs = a.only or ["offload", "qlora"]
    out = {
        "preset": PRESET,
        "tiny": a.tiny,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if a.device == "cuda" else "cpu",
        "pairs": {},
    }
    if {"offload_alone", "offload_vs_ckpt"} & set(pairs):
        plain = _side(LORA, a.tiny, a.device)
        for name, versus in (("offload_alone", "lora"), ("offload_vs_ckpt", "lora-ckpt")):
            if name not in pairs:
                continue
            other = plain if name == "offload_alone" else _side(LORA_CKPT, a.tiny, a.device)
            r = paired(
                lambda: _step(plain, True, a.device),
                lambda o=other: _step(o, False, a.device),
                a.rounds,
                a.warmup,
                a.seed,
            )
            out["pairs"][name] = {"a": "lora-offload", "b": versus, **r}
            print(f"{name}: {r['median']}x (between {r['lo']} and {r['hi']} over {a.rounds} rounds)", flush=True)
            _write(a.out, out)
            del other
        del plain
        if not {"offload", "qlora"} & set(pairs):
            return 0
    lora = _side(LORA_CKPT, a.tiny, a.device)
    if "offload" in pairs:
        r = paired(
            lambda: _step(lora, True, a.device), lambda: _step(lora, False, a.device), a.rounds, a.warmup, a.seed
        )
        out["pairs"]["offload_over_plain"] = {"a": "lora-ckpt-offload", "b": "lora-ckpt", **r}
        print(f"offload / plain: {r['median']}x (between {r['lo']} and {r['hi']} over {a.rounds} rounds)", flush=True)
        _write(a.out, out)  # a pair that ends is kept even if the next one is cut by a time limit
    if "qlora" in pairs:
        qlora = _side(QLORA_CKPT, a.tiny, a.device)
        r = paired(
            lambda: _step(qlora, False, a.device), lambda: _step(lora, False, a.device), a.rounds, a.warmup, a.seed
        )
        out["pairs"]["qlora_over_lora"] = {"a": "qlora-ckpt", "b": "lora-ckpt", **r}
        print(f"QLoRA / LoRA: {r['median']}x (between {r['lo']} and {r['hi']} over {a.rounds} rounds)", flush=True)
    _write(a.out, out)
    return 0


def _write(path: str, out: dict) -> None:
    Path(path).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
