"""The largest batch that really runs on a card, measured on an emulated card, against what "What fits" answers.

A trial runs the plain training loop for two steps at one batch on a card emulated on a larger GPU
(benchmarks/boundary_trial.py: how a card is emulated, what "runs" means, how trials share the GPU). A cell (a preset,
a card, a seeded choice of levers) has its boundary bisected from the predicted batch: the prediction, then its
neighbours, then wider.

    python benchmarks/fits_boundary.py plan --seed 28 --out docs/benchmarks/fits-plan.json         # any machine
    python benchmarks/fits_boundary.py trials docs/benchmarks/fits-plan.json --out $OUT/trials.jsonl  # on the GPU
    python benchmarks/fits_boundary.py report docs/benchmarks/fits-trials-h200.jsonl                 # any machine

Every trial is a JSON line written when it ends; `trials` skips the trials already in --out (a grid spreads over
sessions). `report` prints each cell's answer beside its measured boundary and the misses.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from boundary_trial import GpuMemory, Grid, OutOfTime, cell_key, config  # noqa: E402 - after the path

GIB = 2**30
MAX_BATCH = 4096  # the largest batch "What fits" searches (experiments/distributed/model_fits.py)
PRESETS = ("gpt2", "bert-base", "vit-b16", "resnet50")
LEVERS = {
    "precision": ("amp_bf16", "fp32", "bf16"),
    "optimizer_impl": ("fused", "foreach"),
    "checkpoint": ("none", "per_layer"),
}


# ---------------------------------------------------------------------------------------------- the plan: cells and answers


def answer(cell: dict, quick: bool = False) -> dict:
    """A cell's answers (largest batch, default allocator and expandable segments) on its card."""
    from experiments.core.cards import CARDS, overhead_bytes
    from experiments.distributed.model_fits import allocated_largest_batch, largest_that_runs

    card = next(c for c in CARDS if c["id"] == cell["card"])
    out, cache = {}, {}
    budget = card["total_bytes"] - overhead_bytes(card)
    row = dict(cell, card_bytes=card["total_bytes"], overhead_bytes=overhead_bytes(card))
    try:
        cfg = config(cell["preset"], cell["levers"])
        for expandable in (False, True):
            name = "expandable" if expandable else "default"
            if quick:  # the allocated peak alone: where the trials start (the bisection finds the boundary anyway)
                out[name] = allocated_largest_batch(cfg, budget)
                continue
            r = largest_that_runs(cfg, card["total_bytes"], overhead_bytes(card), expandable=expandable, cache=cache)
            out[name] = r["largest_batch"]
    except ValueError as e:  # a refusal (a configuration the engine does not take, a replay it cannot do) is a row
        return dict(row, error=f"{type(e).__name__}: {e}")
    return dict(row, answer=out)


def plan(args) -> None:
    from experiments.core.cards import CARDS

    rng = random.Random(args.seed)
    cards = [c for c in CARDS if c["id"] in args.cards.split(",")] if args.cards else CARDS
    # Cells written out (any model source, any configuration field among the levers) instead of the seeded grid: a
    # list of them, or a plan whose cells are answered again (on another machine, with another library's release).
    given = json.loads(Path(args.cells).read_text()) if args.cells else []
    given = given["cells"] if isinstance(given, dict) else given
    cells = [{k: c[k] for k in ("preset", "card", "levers")} for c in given]
    for preset in [] if args.cells else args.presets.split(","):
        for card in cards:
            for _ in range(args.per_card):
                levers = {k: rng.choice(v) for k, v in LEVERS.items()}
                if args.finetune:  # fine-tuning cells: a method drawn per cell, in bf16 as its recipes train
                    levers.update(finetune=rng.choice(args.finetune.split(",")), precision="bf16")
                if preset == "resnet50":
                    levers["checkpoint"] = "none"  # a torchvision model: no block list to checkpoint here
                cells.append({"preset": preset, "card": card["id"], "levers": levers})
    unique = list({json.dumps(c, sort_keys=True): c for c in cells}.values())

    # Each answer is kept as it comes (a plan of the large presets takes an hour on two cores): a rerun skips them.
    partial = Path(args.out + ".partial.jsonl")
    kept = [json.loads(line) for line in partial.read_text().splitlines()] if partial.exists() else []
    known = {cell_key(r): r for r in kept}
    todo = [c for c in unique if cell_key(c) not in known]
    t0 = time.perf_counter()
    with concurrent.futures.ProcessPoolExecutor(max_workers=args.workers) as pool:
        futures = [pool.submit(answer, cell, args.quick) for cell in todo]
        for i, fut in enumerate(concurrent.futures.as_completed(futures), 1):
            row = fut.result()
            known[cell_key(row)] = row
            with partial.open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(f"{i}/{len(todo)} {row['preset']} {row['card']} {row.get('answer') or row['error']}", flush=True)
    rows = [known[cell_key(c)] for c in unique]
    data = {"seed": args.seed, "seconds": round(time.perf_counter() - t0, 1), "cells": rows}
    Path(args.out).write_text(json.dumps(data, indent=1) + "\n")
    partial.unlink(missing_ok=True)  # the plan is whole: nothing left to resume
    print(f"{len(rows)} cells planned in {data['seconds']} s -> {args.out}")


# ---------------------------------------------------------------------------------------------- trials: the boundary


def trials(args) -> None:
    plans = [json.loads(Path(p).read_text()) for p in args.plan]  # several plans share one GPU and one --out
    done = {}
    out = Path(args.out)
    kept = set()
    if out.exists():
        for line in out.read_text().splitlines():
            row = json.loads(line)
            if "error" not in row:
                done[row["key"]] = row
                kept.add(row["key"])
    cells = [c for data in plans for c in data["cells"] if "answer" in c]  # a refused cell has an error instead
    if args.only:
        cells = [c for c in cells if c["preset"] in args.only.split(",")]
    if args.cards:
        cells = [c for c in cells if c["card"] in args.cards.split(",")]
    deadline = time.monotonic() + args.minutes * 60

    failures = []

    def write(row):
        if "error" in row:  # a trial that failed for another reason than memory says nothing about the boundary
            failures.append(row["error"])
            if len(failures) >= 3 and len(failures) == len(done) - len(kept):
                print(f"the first trials all failed: {failures[0]}", flush=True)
                os._exit(1)
        with out.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(
            json.dumps({k: row.get(k) for k in ("preset", "card", "batch", "expandable", "ran", "seconds")}), flush=True
        )

    # The GPU's memory from the driver, so that this process holds no CUDA context of its own beside the trials.
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i", "0"],
        capture_output=True,
        text=True,
        check=True,
    )
    total = int(smi.stdout.split()[0]) * 2**20
    grid = Grid(done, write, GpuMemory(total), deadline)

    def work(cell):
        got = {}
        for expandable in (False, True):
            try:
                got["expandable" if expandable else "default"] = grid.boundary(cell, expandable)
            except OutOfTime:
                break
        print(
            json.dumps(
                {"cell": [cell["preset"], cell["card"], cell["levers"]], "answer": cell["answer"], "measured": got}
            ),
            flush=True,
        )

    # In a seeded shuffle, so that a grid cut short by --minutes is a sample of every preset and card; the cards
    # that fill most of the GPU last, since each runs alone. An answer at the search's limit is not bisected.
    cells = [c for c in cells if max(c["answer"].values()) < MAX_BATCH]
    larger = sorted({c["card"] for c in cells if c["card_bytes"] > total})
    if larger:  # an emulated card is a share of this GPU's memory
        print(f"skipped, larger than this GPU: {', '.join(larger)}", flush=True)
        cells = [c for c in cells if c["card_bytes"] <= total]
    random.Random(0).shuffle(cells)
    cells.sort(key=lambda c: (c["card_bytes"] > total // 2, max(c["answer"].values()) == 0))
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.parallel) as pool:
        list(pool.map(work, cells))


# ---------------------------------------------------------------------------------------------- report


def measured_boundaries(rows: list[dict]) -> dict:
    """(preset, card, levers, expandable) -> the largest batch that ran, where the next one was tried and failed."""
    by = {}
    for r in rows:
        if "error" in r:  # neither ran nor ran out of memory
            continue
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
    pl.add_argument("--finetune", default="", help="fine-tuning methods to draw from, e.g. lora,qlora")
    pl.add_argument(
        "--cells", default="", help="a JSON list of cells {preset, card, levers}, or a plan, instead of the grid"
    )
    pl.add_argument("--out", required=True)
    tr = sub.add_parser("trials")
    tr.add_argument("plan", nargs="+")
    tr.add_argument("--out", required=True)
    tr.add_argument("--only", default="", help="presets, comma-separated")
    tr.add_argument("--cards", default="", help="card ids, comma-separated (e.g. the cards only this GPU can emulate)")
    tr.add_argument("--parallel", type=int, default=4)
    tr.add_argument("--minutes", type=float, default=8)
    rp = sub.add_parser("report")
    rp.add_argument("trials")
    rp.add_argument("--plan", required=True)
    args = p.parse_args()
    {"plan": plan, "trials": trials, "report": report}[args.cmd](args)


if __name__ == "__main__":
    main()
