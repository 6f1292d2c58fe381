"""The largest batch that really runs on a card, measured on an emulated card, against what "What fits" answers.

A card of C bytes is emulated on a larger GPU: in a fresh process, after CUDA and cuBLAS have started, the allocator
may hold what the card would leave it, C less what the process already holds outside the allocator
(`set_per_process_memory_fraction`); the plain training loop then runs two steps (the optimizer state appears in step
1, and most failures come in step 2). A trial "runs" when no out-of-memory error was raised and the most the process
held (the allocator's reserved peak plus what it holds outside it at the end: the CUDA context grows as kernels load)
is within C. A cell's boundary is bisected from the predicted batch: the prediction, then its neighbours, then wider.

    python benchmarks/fits_boundary.py plan --seed 28 --out docs/benchmarks/fits-plan.json         # any machine
    python benchmarks/fits_boundary.py trials docs/benchmarks/fits-plan.json --out $OUT/trials.jsonl  # on the GPU
    python benchmarks/fits_boundary.py report docs/benchmarks/fits-trials-h200.jsonl                 # any machine

Every trial is a JSON line written when it ends; `trials` skips the trials already in --out (a grid spreads over
sessions). `report` prints each cell's answer beside its measured boundary and the misses.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import functools
import gc
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GIB = 2**30
PRESETS = ("gpt2", "bert-base", "vit-b16", "resnet50")
LEVERS = {
    "precision": ("amp_bf16", "fp32", "bf16"),
    "optimizer_impl": ("fused", "foreach"),
    "checkpoint": ("none", "per_layer"),
}


def config(preset: str, levers: dict, batch: int | None = None):
    from experiments.core.config import ExperimentConfig
    from experiments.estimate.estimator import preset_defaults

    source = f"preset:{preset}"
    data = {**preset_defaults(source), "model_source": source, **levers, "device": "cuda", "steps": 2}
    data["timing_steps"] = 0
    if batch is not None:
        data["batch"] = batch
    return ExperimentConfig.from_dict(data)


# ---------------------------------------------------------------------------------------------- one trial, its own process


def trial(params: dict, card_bytes: int, expandable: bool) -> dict:
    """Runs in a fresh process (the allocator setting is read when CUDA starts)."""
    import torch
    from model_presets import plain_step  # the same plain loop as the preset benchmark (this folder)

    from experiments.training.models import spec_for
    from experiments.training.strategies import AMP_DTYPES, float32_precision, make_optimizer

    cfg = config(params["preset"], params["levers"], params["batch"])
    dev = torch.device("cuda")
    total = torch.cuda.get_device_properties(dev).total_memory
    for dtype in (torch.float32, torch.bfloat16):  # cuBLAS's handles and workspaces, as any first step makes them
        w = torch.randn(64, 64, device=dev, dtype=dtype, requires_grad=True)
        (w @ w).sum().backward()
    torch.cuda.synchronize()
    free, _ = torch.cuda.mem_get_info()
    outside_start = total - free - torch.cuda.memory_reserved()
    baseline_reserved = torch.cuda.memory_reserved()
    torch.cuda.set_per_process_memory_fraction((card_bytes - outside_start) / total, dev)
    spec = spec_for(cfg)
    amp = AMP_DTYPES.get(cfg.precision)
    oom = None
    t0 = time.perf_counter()
    try:
        with float32_precision(cfg):
            torch.manual_seed(cfg.seed)
            model = spec.build(cfg, dev)
            spec.enable_checkpointing(model, cfg)
            opt = make_optimizer(cfg, model.parameters())
            scaler = torch.amp.GradScaler("cuda") if cfg.precision == "amp_fp16" else None
            inputs, targets = spec.batch(cfg, dev, cfg.seed + 1)
            for _step in range(cfg.steps):
                plain_step(cfg, spec, model, opt, scaler, (inputs, targets), amp, "cuda")
            torch.cuda.synchronize()
    except torch.OutOfMemoryError as e:
        oom = str(e).splitlines()[0][:300]
    free, _ = torch.cuda.mem_get_info()
    outside_end = total - free - torch.cuda.memory_reserved()
    peak_reserved = torch.cuda.max_memory_reserved()
    held = peak_reserved + outside_end
    return {
        "ran": oom is None and held <= card_bytes,
        "oom": oom,
        "peak_reserved_bytes": peak_reserved,
        "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
        "baseline_reserved_bytes": baseline_reserved,
        "outside_start_bytes": outside_start,
        "outside_end_bytes": outside_end,
        "held_bytes": held,
        "seconds": round(time.perf_counter() - t0, 2),
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(dev),
    }


def _child(params: dict, card_bytes: int, expandable: bool) -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    if expandable:
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    arg = json.dumps({"params": params, "card_bytes": card_bytes, "expandable": expandable})
    r = subprocess.run([sys.executable, __file__, "child", arg], capture_output=True, text=True, env=env, timeout=900)
    if r.returncode:
        return {"ran": False, "error": (r.stderr.strip().splitlines() or ["?"])[-1][:300]}
    return json.loads(r.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------- the plan: cells and answers


def answer(cell: dict, quick: bool = False) -> dict:
    """A cell's answers (largest batch, default allocator and expandable segments) on its card."""
    from experiments.core.cards import CARDS, overhead_bytes
    from experiments.distributed.model_fits import allocated_largest_batch, largest_that_runs

    card = next(c for c in CARDS if c["id"] == cell["card"])
    cfg = config(cell["preset"], cell["levers"])
    out, cache = {}, {}
    budget = card["total_bytes"] - overhead_bytes(card)
    for expandable in (False, True):
        name = "expandable" if expandable else "default"
        if quick:  # the allocated peak alone: where the trials start (the bisection finds the boundary anyway)
            out[name] = allocated_largest_batch(cfg, budget)
            continue
        r = largest_that_runs(cfg, card["total_bytes"], overhead_bytes(card), expandable=expandable, cache=cache)
        out[name] = r["largest_batch"]
    return dict(cell, card_bytes=card["total_bytes"], overhead_bytes=overhead_bytes(card), answer=out)


def plan(args) -> None:
    from experiments.core.cards import CARDS

    rng = random.Random(args.seed)
    cards = [c for c in CARDS if c["id"] in args.cards.split(",")] if args.cards else CARDS
    cells = []
    for preset in args.presets.split(","):
        for card in cards:
            for _ in range(args.per_card):
                levers = {k: rng.choice(v) for k, v in LEVERS.items()}
                if preset == "resnet50":
                    levers["checkpoint"] = "none"  # a torchvision model: no block list to checkpoint here
                cells.append({"preset": preset, "card": card["id"], "levers": levers})
    unique = list({json.dumps(c, sort_keys=True): c for c in cells}.values())

    t0 = time.perf_counter()
    with concurrent.futures.ProcessPoolExecutor(max_workers=args.workers) as pool:
        rows = list(pool.map(functools.partial(answer, quick=args.quick), unique))
    data = {"seed": args.seed, "seconds": round(time.perf_counter() - t0, 1), "cells": rows}
    Path(args.out).write_text(json.dumps(data, indent=1) + "\n")
    print(f"{len(rows)} cells planned in {data['seconds']} s -> {args.out}")


# ---------------------------------------------------------------------------------------------- trials: the boundary


def _key(cell: dict, expandable: bool, batch: int) -> str:
    return json.dumps([cell["preset"], cell["card"], cell["levers"], expandable, batch], sort_keys=True)


def boundary(cell: dict, expandable: bool, done: dict, write) -> int:
    """The largest batch that runs, bisected from the answer: b and b+1 first, then steps that double."""
    start = max(1, cell["answer"]["expandable" if expandable else "default"])

    def runs(b: int) -> bool:
        k = _key(cell, expandable, b)
        if k not in done:
            params = {"preset": cell["preset"], "levers": cell["levers"], "batch": b}
            r = _child(params, cell["card_bytes"], expandable)
            done[k] = dict(
                r,
                key=k,
                card=cell["card"],
                preset=cell["preset"],
                levers=cell["levers"],
                batch=b,
                expandable=expandable,
                card_bytes=cell["card_bytes"],
            )
            write(done[k])
        return done[k]["ran"]

    if runs(start):
        lo, step = start, 1
        while runs(lo + step):
            lo, step = lo + step, step * 2
        hi = lo + step
    else:
        hi, step = start, 1
        while hi - step >= 1 and not runs(hi - step):
            hi, step = hi - step, step * 2
        lo = hi - step
        if lo < 1:
            return 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if runs(mid) else (lo, mid)
    return lo


def trials(args) -> None:
    data = json.loads(Path(args.plan).read_text())
    done = {}
    out = Path(args.out)
    if out.exists():
        for line in out.read_text().splitlines():
            row = json.loads(line)
            done[row["key"]] = row
    cells = data["cells"]
    if args.only:
        cells = [c for c in cells if c["preset"] in args.only.split(",")]
    deadline = time.monotonic() + args.minutes * 60

    def write(row):
        with out.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(
            json.dumps({k: row.get(k) for k in ("preset", "card", "batch", "expandable", "ran", "seconds")}), flush=True
        )

    def work(cell):
        got = {}
        for expandable in (False, True):
            if time.monotonic() > deadline:
                return got
            got["expandable" if expandable else "default"] = boundary(cell, expandable, done, write)
        return got

    with concurrent.futures.ThreadPoolExecutor(max_workers=args.parallel) as pool:
        for cell, got in zip(cells, pool.map(work, cells), strict=True):
            print(
                json.dumps(
                    {"cell": [cell["preset"], cell["card"], cell["levers"]], "answer": cell["answer"], "measured": got}
                ),
                flush=True,
            )


# ---------------------------------------------------------------------------------------------- report


def measured_boundaries(rows: list[dict]) -> dict:
    """(preset, card, levers, expandable) -> the largest batch that ran, where the next one was tried and failed."""
    by = {}
    for r in rows:
        k = (r["preset"], r["card"], json.dumps(r["levers"], sort_keys=True), r["expandable"])
        by.setdefault(k, {})[r["batch"]] = r["ran"]
    out = {}
    for k, tried in by.items():
        ran = [b for b, ok in tried.items() if ok]
        largest = max(ran) if ran else 0
        if (largest + 1) in tried and not tried[largest + 1]:
            out[k] = largest
    return out


def report(args) -> None:
    rows = [json.loads(line) for line in Path(args.trials).read_text().splitlines()]
    plan_cells = json.loads(Path(args.plan).read_text())["cells"]
    bounds = measured_boundaries(rows)
    n = equal = above = 0
    for cell in plan_cells:
        for expandable in (False, True):
            k = (cell["preset"], cell["card"], json.dumps(cell["levers"], sort_keys=True), expandable)
            if k not in bounds:
                continue
            answer = cell["answer"]["expandable" if expandable else "default"]
            n += 1
            equal += answer == bounds[k]
            above += answer > bounds[k]
            mark = "" if answer == bounds[k] else ("  ABOVE" if answer > bounds[k] else "  below")
            print(
                f"{cell['preset']:10} {cell['card']:14} {json.dumps(cell['levers'])} expandable={expandable!s:5} "
                f"answer {answer:4}  measured {bounds[k]:4}{mark}"
            )
    print(f"{n} boundaries: {equal} equal, {above} above, {n - equal - above} below")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    pl = sub.add_parser("plan")
    pl.add_argument("--seed", type=int, default=28)
    pl.add_argument("--presets", default=",".join(PRESETS))
    pl.add_argument("--cards", default="")
    pl.add_argument("--per-card", type=int, default=1)
    pl.add_argument("--workers", type=int, default=2)
    pl.add_argument("--quick", action="store_true", help="start points from the allocated peak alone")
    pl.add_argument("--out", required=True)
    tr = sub.add_parser("trials")
    tr.add_argument("plan")
    tr.add_argument("--out", required=True)
    tr.add_argument("--only", default="")
    tr.add_argument("--parallel", type=int, default=4)
    tr.add_argument("--minutes", type=float, default=8)
    rp = sub.add_parser("report")
    rp.add_argument("trials")
    rp.add_argument("--plan", required=True)
    ch = sub.add_parser("child")
    ch.add_argument("arg")
    args = p.parse_args()
    if args.cmd == "child":
        a = json.loads(args.arg)
        gc.collect()
        print(json.dumps(trial(a["params"], a["card_bytes"], a["expandable"])))
        return
    {"plan": plan, "trials": trials, "report": report}[args.cmd](args)


if __name__ == "__main__":
    main()
