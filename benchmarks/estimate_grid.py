"""Estimator accuracy on a seeded random grid of configurations the repo has never seen.

    python benchmarks/estimate_grid.py --device cuda --n 60 --seed 7 --out docs/benchmarks/estimate-grid-h200.json
    python benchmarks/estimate_grid.py --device cpu --n 60 --seed 7 --out docs/benchmarks/estimate-grid-cpu.json

Every configuration is run for real through the engine (two training steps, no timing) and compared
with the estimate the app shows for that device. Sizes are drawn log-uniformly, so the grid spans small
launch-bound runs to multi-GiB ones (on CPU kept to what two cores finish in seconds).

On CUDA every row also holds the reserved figure: the run's largest `memory_reserved()` at a phase's end (the default
allocator's reserved only grows) less the baseline's allocated bytes, as its peak is `max_memory_allocated()` less
them, against the reserved figure of the estimate a GPU server shows (`replay` with the scratch memory its worker
measured, experiments/jobs/estimates.py; `replay_device`'s figure beside it). `--resume` continues a grid its --out file holds (the draws are replayed, not run, up to its last).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.reference_estimator import analytic  # noqa: E402
from experiments.core.config import (  # noqa: E402
    CHECKPOINTS,
    OPTIMIZER_IMPLS,
    OPTIMIZERS,
    PRECISIONS,
    ConfigError,
    ExperimentConfig,
)
from experiments.core.finetune import BNB_OPTIMIZERS  # noqa: E402
from experiments.core.units import GIB, MIB  # noqa: E402
from experiments.estimate.estimator import estimate  # noqa: E402
from experiments.measure.device import resolve_device  # noqa: E402
from experiments.measure.fits import measure_workspaces  # noqa: E402
from experiments.measure.run import run_experiment  # noqa: E402

METHODS = ("analytic", "replay")  # the analytic model is the reference in benchmarks/reference_estimator.py


def _log_int(rng: random.Random, lo: int, hi: int, multiple: int = 1) -> int:
    value = math.exp(rng.uniform(math.log(lo), math.log(hi)))
    return max(multiple, int(round(value / multiple)) * multiple)


def draw(rng: random.Random, device: str) -> ExperimentConfig:
    """One random configuration over every option; CPU draws are smaller so two cores finish quickly."""
    big = device == "cuda"
    model = rng.choice(("mlp", "cnn", "transformer"))
    kw = {
        "model": model,
        "precision": rng.choice(PRECISIONS),
        "checkpoint": rng.choice(CHECKPOINTS),
        "accum": rng.choice((1, 1, 2, 4)),
        "optimizer": rng.choice(OPTIMIZERS),
        "optimizer_impl": rng.choice(OPTIMIZER_IMPLS),
        "zero_grad_to_none": rng.random() < 0.8,
        "inplace": rng.random() < 0.2,
        "seed": rng.randrange(1000),
        "device": device,
        "steps": 2,
        "timing_steps": 0,
        "force": True,
    }
    if kw["optimizer"] in BNB_OPTIMIZERS:
        kw["optimizer_impl"] = "default"  # bitsandbytes' optimizers have one implementation
    if kw["checkpoint"] == "segments":
        kw["segments"] = rng.choice((0, 2, 3))
    if model == "mlp":
        kw.update(
            layers=_log_int(rng, 2, 32 if big else 12),
            width=_log_int(rng, 64, 4096 if big else 1024, 64),
            batch=_log_int(rng, 8, 16384 if big else 1024, 8),
        )
    elif model == "cnn":
        kw.update(
            layers=rng.randint(2, 8 if big else 5),
            width=_log_int(rng, 16, 256 if big else 48, 8),
            image_size=rng.choice((32, 64, 128, 224) if big else (16, 32, 64)),
            batch=_log_int(rng, 8, 128 if big else 16, 8),
        )
    else:
        heads = rng.choice((4, 8, 16))
        kw.update(
            layers=rng.randint(1, 8 if big else 3),
            heads=heads,
            width=heads * _log_int(rng, 32, 128 if big else 32, 8),
            seq_len=_log_int(rng, 64, 2048 if big else 256, 64),
            batch=_log_int(rng, 4, 16 if big else 8, 4),
        )
    if kw["checkpoint"] == "segments" and kw["segments"] > kw["layers"]:
        kw["segments"] = 0
    kw["batch"] = max(kw["accum"], kw["batch"] // kw["accum"] * kw["accum"])
    return ExperimentConfig(**kw)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--n", type=int, default=60)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--limit-gib", type=float, default=40.0, help="skip draws estimated above this")
    ap.add_argument("--out")
    ap.add_argument("--rescore", help="a grid JSON measured on the GPU: recompute its estimates here (no GPU needed)")
    ap.add_argument("--workspaces", help="with --rescore: the scratch-memory table the GPU's runs measured")
    ap.add_argument("--resume", action="store_true", help="continue the grid in --out (same --device and --seed)")
    args = ap.parse_args()
    if args.rescore:
        rescore(args)
        return
    rng = random.Random(args.seed)
    rows, t_start, draws = [], time.time(), 0
    if args.resume and args.out and Path(args.out).exists():
        rows = json.loads(Path(args.out).read_text())["rows"]
        while draws < rows[-1]["draw"]:  # the same random draws as the first part, none of them run again
            draws += 1
            try:
                draw(rng, args.device)
            except ConfigError:
                pass
        print(f"resumed after {len(rows)} rows (draw {draws})", flush=True)
    while len(rows) < args.n:
        draws += 1
        try:
            cfg = draw(rng, args.device)
        except ConfigError:
            continue
        # replay_device hands bitsandbytes' kernels a FakeTensor's data pointer: on an H100 (bitsandbytes 0.50.2) an
        # illegal memory access that ended the process's CUDA context, so those configurations skip it.
        device_replay = args.device == "cuda" and cfg.optimizer not in BNB_OPTIMIZERS
        methods = METHODS + (("replay_device",) if device_replay else ())
        ests, transients = {}, None
        if args.device == "cuda":
            # The app's estimate on a GPU server includes the scratch memory its worker has measured.
            sigs = estimate(cfg, device_type="cuda")["signatures"]
            transients = measure_workspaces(sigs, resolve_device("cuda"))
        for m in methods:
            try:
                ests[m] = (
                    analytic(cfg)
                    if m == "analytic"
                    else estimate(cfg, device_type=args.device, method=m, transients=transients)
                )
            except Exception as e:  # noqa: BLE001 - a method that cannot trace a config is reported, not fatal
                print(f"  {m} failed: {type(e).__name__}: {str(e)[:200]}", flush=True)
        if max(e["peak_bytes"] for e in ests.values()) > args.limit_gib * GIB:
            continue
        result = run_experiment(cfg)
        if result.get("oom") or result.get("peak_bytes") is None:
            continue
        measured = result["peak_bytes"] - result["baseline_bytes"]
        changed = {
            k: v
            for k, v in cfg.to_dict().items()
            if v != ExperimentConfig().to_dict()[k] and k not in ("device", "steps", "timing_steps", "force", "seed")
        }
        row = {
            "draw": draws,
            "config": changed,
            "measured_mib": measured / MIB,
            "measured_phase": result["peak_phase"]["phase"],
            "other_mib": (result.get("breakdown") or {}).get("other", 0) / MIB,
        }
        for m, est in ests.items():
            row[m] = {
                "estimate_mib": est["peak_bytes"] / MIB,
                "phase": est["peak_phase"],
                "error_pct": (est["peak_bytes"] - measured) / measured * 100,
            }
        row["reserved"] = reserved_row(result, ests.get("replay"))  # the app's estimate on a GPU server
        if row["reserved"] and ests.get("replay_device"):
            row["reserved"]["replay_device_bytes"] = ests["replay_device"]["reserved_bytes"]
        rows.append(row)
        if args.out:  # after every row, so a run stopped at its time limit still leaves its rows
            Path(args.out).write_text(json.dumps({"rows": rows}, indent=1))
        print(
            f"{len(rows):3d} "
            + " ".join(f"{m} {row[m]['error_pct']:+7.2f}%" for m in ests)
            + f"  measured {measured / MIB:10.2f} MiB"
            + (
                f"  reserved {row['reserved']['error_pct']:+7.2f}% ({row['reserved']['diff_bytes'] / MIB:+.2f} MiB"
                f" of {row['reserved']['measured_mib']:.0f})"
                if row["reserved"]
                else ""
            )
            + f"  {changed}",
            flush=True,
        )
    summary = {"device": args.device, "n": len(rows), "seed": args.seed, "seconds": round(time.time() - t_start, 1)}
    summarize(rows, summary)
    print(json.dumps(summary, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))


def reserved_row(result: dict, est: dict | None) -> dict | None:
    """The run's reserved peak over its baseline against the estimate's reserved figure (None on a CPU, or where the
    estimate has none)."""
    reserved = [p["reserved_bytes"] for p in result["phases"] if p.get("reserved_bytes") is not None]
    if not reserved or not est or est.get("reserved_bytes") is None:
        return None
    measured = max(reserved) - result["baseline_bytes"]
    return reserved_figures(measured, est["reserved_bytes"])


def reserved_figures(measured: int, estimated: int) -> dict:
    return {
        "measured_bytes": measured,
        "estimate_bytes": estimated,
        "measured_mib": measured / MIB,
        "estimate_mib": estimated / MIB,
        "diff_bytes": estimated - measured,
        "error_pct": (estimated - measured) / measured * 100 if measured else 0.0,
    }


def summarize(rows: list[dict], summary: dict) -> None:
    for m in sorted({m for r in rows for m in r if m in METHODS + ("replay_device",)}):
        errors = sorted(abs(r[m]["error_pct"]) for r in rows if m in r)
        by_model = {}
        for r in rows:
            if m in r:
                by_model.setdefault(r["config"].get("model", "mlp"), []).append(abs(r[m]["error_pct"]))
        summary[m] = {
            "median_abs_pct": statistics.median(errors),
            "p90_abs_pct": statistics.quantiles(errors, n=10, method="inclusive")[-1],
            "worst_abs_pct": errors[-1],
            "within_2pct": sum(e <= 2 for e in errors),
            "within_10pct": sum(e <= 10 for e in errors),
            "median_abs_pct_by_model": {k: statistics.median(v) for k, v in by_model.items()},
        }
    res = [r["reserved"] for r in rows if r.get("reserved")]
    if res:
        errors = sorted(abs(r["error_pct"]) for r in res)
        summary["reserved"] = {
            "n": len(res),
            "median_abs_pct": statistics.median(errors),
            "p90_abs_pct": statistics.quantiles(errors, n=10, method="inclusive")[-1] if len(errors) > 1 else errors[0],
            "worst_abs_pct": errors[-1],
            "exact": sum(r["diff_bytes"] == 0 for r in res),
            "within_2mib": sum(abs(r["diff_bytes"]) <= 2 * MIB for r in res),
            "over": sum(r["diff_bytes"] > 0 for r in res),
            "under": sum(r["diff_bytes"] < 0 for r in res),
            "median_diff_mib": statistics.median(r["diff_bytes"] / MIB for r in res),
        }


def _measured_with_tf32_off(table: dict[str, int]) -> dict[str, int]:
    """The table as a run with cuDNN's TF32 switch off saw it: each convolution's workspace under the switch's
    default is the one measured with it off. Rows marked `"cudnn_tf32": false` were measured that way by an
    engine that turned the switch off for every precision but tf32 (half-precision convolutions included); a
    precision choice reproduces it only for fp32 (fp32_strict)."""
    out = dict(table)
    for sig, value in table.items():
        spec = json.loads(sig)
        if spec.get("tf32") is False:
            out[json.dumps(dict(spec, tf32=True), sort_keys=True, default=str)] = value
    return out


def rescore(args) -> None:
    """The estimates of a GPU grid recomputed from its configurations, with the scratch memory those runs measured
    (experiments/estimate/workspaces.py table): the same computation the app does before a run, no GPU needed."""
    from experiments.estimate.workspaces import load

    data = json.loads(Path(args.rescore).read_text())
    table = load(Path(args.workspaces)) if args.workspaces else {}
    rows = []
    for row in data["rows"]:
        cfg = ExperimentConfig.from_dict({**row["config"], "device": "cuda", "steps": 2, "timing_steps": 0})
        transients = table if row.get("cudnn_tf32", True) else _measured_with_tf32_off(table)
        est = estimate(cfg, device_type="cuda", method="replay", transients=transients)
        measured = row["measured_mib"] * MIB
        row = dict(
            row,
            replay={
                "estimate_mib": est["peak_bytes"] / MIB,
                "phase": est["peak_phase"],
                "error_pct": (est["peak_bytes"] - measured) / measured * 100,
                "unmeasured": len(est["unmeasured"]),
            },
        )
        row.pop("replay_device", None)
        if row.get("reserved") and est.get("reserved_bytes") is not None:  # the rescored estimate's, where measured
            row["reserved"] = reserved_figures(row["reserved"]["measured_bytes"], est["reserved_bytes"])
        rows.append(row)
        print(
            f"{len(rows):3d} replay {row['replay']['error_pct']:+7.2f}%  analytic {row['analytic']['error_pct']:+7.2f}%"
            f"  measured {row['measured_mib']:10.2f} MiB  unmeasured {len(est['unmeasured'])}  {row['config']}"
        )
    summary = {
        "device": "cuda",
        "n": len(rows),
        "rescored_from": args.rescore,
        "workspaces": len(table),
        "seed": data.get("summary", {}).get("seed", args.seed),
    }
    summarize(rows, summary)
    print(json.dumps(summary, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
