"""Per-rank estimate accuracy of the data-parallel strategies on a seeded random grid the repo has never seen.

    python benchmarks/sharded_grid.py --device cuda --n 8 --seed 11 --out docs/benchmarks/sharded-grid-h200x2.json
    python benchmarks/sharded_grid.py --rescore docs/benchmarks/sharded-grid-h200x2.json   # no GPU needed

Every configuration runs once per strategy, each in freshly started rank processes (a launch shared between
strategies leaks cached blocks into the next one's baseline), and every rank's net peak is compared with the
per-rank estimate the multi-GPU page shows. The GPU run also measures the scratch memory of the per-rank
configuration's ops (experiments/estimate/workspaces.py) and stores it, so --rescore recomputes the estimates of the
same rows with the current estimator on any machine.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

from experiments.core.config import CUDA_ONLY, STRATEGIES, DistributedConfig, ExperimentConfig
from experiments.core.units import MIB
from experiments.distributed.estimate import estimate_sharded
from experiments.distributed.launch import run_distributed


def draw(rng: random.Random, device: str) -> dict:
    big = device == "cuda"
    model = rng.choice(("mlp", "mlp", "transformer"))
    kw = {
        "model": model,
        "precision": rng.choice(("fp32", "amp_bf16", "bf16")),
        "checkpoint": rng.choice(("none", "none", "per_layer")),
        "accum": rng.choice((1, 1, 2)),
        "optimizer": rng.choice(("adam", "adam", "sgd_momentum")),
        "steps": 3,
        "timing_steps": 0,
        "seed": rng.randrange(1000),
    }
    if model == "mlp":
        kw.update(
            layers=rng.randint(2, 8),
            width=rng.choice((256, 512, 1024, 2048) if big else (64, 128, 256)),
            batch=rng.choice((16, 64, 256, 1024, 4096) if big else (8, 16, 64)),
        )
    else:
        heads = rng.choice((4, 8))
        kw.update(
            layers=rng.randint(1, 4),
            heads=heads,
            width=heads * rng.choice((32, 64, 128) if big else (8, 16)),
            seq_len=rng.choice((128, 256, 512) if big else (32, 64)),
            batch=rng.choice((4, 8, 16) if big else (2, 4)),
        )
    kw["batch"] = max(kw["accum"], kw["batch"] // kw["accum"] * kw["accum"])
    return kw


def _transients(rows: list[dict]) -> dict[str, int]:
    table = {}
    for row in rows:
        table.update(row.get("workspaces") or {})
    return table


def _score(params: dict, measured: list[int], transients: dict | None) -> dict:
    dcfg = DistributedConfig.from_dict(params)
    est = estimate_sharded(dcfg, device_type="cuda" if params.get("device") == "cuda" else "cpu", transients=transients)
    worst = max(measured)
    low, high = est["peak_bytes"], est.get("peak_high_bytes", est["peak_bytes"])
    inside = low <= worst <= high
    nearest = worst if inside else (low if worst < low else high)
    return {
        "estimate_mib": low / MIB,
        "estimate_high_mib": high / MIB,
        "within_range": inside,
        "error_pct": (nearest - worst) / worst * 100,
        "point_error_pct": (low - worst) / worst * 100,
    }


def summarize(rows: list[dict]) -> dict:
    out = {}
    for strategy in sorted({r["params"]["strategy"] for r in rows}):
        errors = sorted(abs(r["score"]["error_pct"]) for r in rows if r["params"]["strategy"] == strategy)
        out[strategy] = {
            "n": len(errors),
            "median_abs_pct": round(statistics.median(errors), 3),
            "worst_abs_pct": round(errors[-1], 3),
            "within_2pct": sum(e <= 2 for e in errors),
        }
    every = sorted(abs(r["score"]["error_pct"]) for r in rows)
    if every:
        out["all"] = {
            "n": len(every),
            "median_abs_pct": round(statistics.median(every), 3),
            "p90_abs_pct": round(statistics.quantiles(every, n=10, method="inclusive")[-1], 3)
            if len(every) > 1
            else every[0],
            "worst_abs_pct": round(every[-1], 3),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--time-limit", type=float, default=540)
    ap.add_argument("--out")
    ap.add_argument("--rescore", help="a grid JSON measured on the GPUs: recompute its estimates here")
    args = ap.parse_args()
    if args.rescore:
        data = json.loads(Path(args.rescore).read_text())
        table = _transients(data["rows"])
        for row in data["rows"]:
            row["score"] = _score(row["params"], row["measured_net"], table)
            s = row["score"]
            print(
                f"{row['params']['strategy']:14s} {s['error_pct']:+7.2f}% (point {s['point_error_pct']:+7.2f}%)  "
                f"measured {max(row['measured_net']) / MIB:9.2f} MiB  {row['config']}"
            )
        data["summary"] = dict(data.get("summary") or {}, **summarize(data["rows"]), rescored=True)
        print(json.dumps(data["summary"], indent=1))
        if args.out:
            Path(args.out).write_text(json.dumps(data, indent=1) + "\n")
        return
    rng = random.Random(args.seed)
    t0, rows = time.monotonic(), []
    strategies = [s for s in STRATEGIES if args.device == "cuda" or s not in CUDA_ONLY]
    for _ in range(args.n):
        config = draw(rng, args.device)
        workspaces = {}
        if args.device == "cuda":
            from experiments.estimate.estimator import estimate
            from experiments.measure.device import resolve_device
            from experiments.measure.fits import measure_workspaces

            rank_cfg = ExperimentConfig.from_dict({**config, "device": "cuda"})
            sigs = estimate(rank_cfg, device_type="cuda")["signatures"]
            workspaces = measure_workspaces(sigs, resolve_device("cuda")) if sigs else {}
        for strategy in strategies:
            if time.monotonic() - t0 > args.time_limit:
                break
            params = {
                **config,
                "device": args.device,
                "strategy": strategy,
                "world_size": args.world_size,
                "check_update": False,
            }
            if args.device == "cuda":  # the scratch memory of the ops this strategy's rank runs (FSDP2's dtypes)
                est = estimate_sharded(DistributedConfig.from_dict(params), "cuda", transients=workspaces)
                if est.get("unmeasured"):
                    workspaces.update(measure_workspaces(est["unmeasured"], resolve_device("cuda")))
            result = run_distributed(params)
            if result.get("errors") or result.get("oom"):
                print(f"skipped {strategy} {config}: {result.get('errors') or 'out of memory'}", flush=True)
                continue
            measured = [r["peak_bytes"] - (r.get("baseline_bytes") or 0) for r in result["ranks"]]
            row = {
                "config": config,
                "params": params,
                "measured_net": measured,
                "workspaces": workspaces,
                "peak_phase": result["ranks"][0].get("peak_phase"),
                "breakdown": {k: v for k, v in (result["ranks"][0].get("breakdown") or {}).items() if v},
            }
            row["score"] = _score(params, measured, workspaces)
            rows.append(row)
            print(
                f"{strategy:14s} {row['score']['error_pct']:+7.2f}%  measured {max(measured) / MIB:9.2f} MiB  {config}",
                flush=True,
            )
            if args.out:
                Path(args.out).write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    summary = {
        "device": args.device,
        "world_size": args.world_size,
        "seed": args.seed,
        # The estimate replays the installed torch's FSDP2: a later torch is compared with a grid of its own.
        "torch": __import__("torch").__version__,
        "rows": len(rows),
        "seconds": round(time.monotonic() - t0, 1),
        **summarize(rows),
    }
    print(json.dumps(summary, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps({"summary": summary, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
