"""Step time and run duration as the page predicts them before Run, against the run, on a seeded random grid.

    python benchmarks/time_grid.py --device cpu --n 45 --seed 23 --out docs/benchmarks/time-grid-cpu.json
    python benchmarks/time_grid.py --device cuda --n 45 --seed 23 --out docs/benchmarks/time-grid-h200.json

The device's rates are measured first, in this process, as the worker measures them when it starts
(experiments/estimate/throughput.py). Then each configuration (drawn as benchmarks/estimate_grid.py draws them, with its
own number of measured and timed steps) is estimated, its step time and run duration predicted
(experiments/estimate/steptime.py), run through the engine exactly as a job runs, and compared. Configurations whose
predicted run is longer than --max-run-s are skipped (the selection uses the prediction, so it favours runs the
prediction underestimates: a harder test of the high end). The machine's load is printed with every row: on a
shared machine a step's time follows the other processes' demand for the cores.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from estimate_grid import draw  # noqa: E402

from experiments.core.config import ConfigError  # noqa: E402
from experiments.estimate.estimator import estimate  # noqa: E402
from experiments.estimate.steptime import current_load, family, predict_run_s, predict_step_ms  # noqa: E402


def _within(value: float, low: float, high: float) -> str:
    return "in" if low <= value <= high else ("below" if value < low else "above")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--n", type=int, default=45)
    ap.add_argument("--seed", type=int, default=23)
    ap.add_argument("--threads", type=int, help="torch threads on a CPU (default: torch's, one per core)")
    ap.add_argument("--max-run-s", type=float, default=8.0, help="skip draws predicted to run longer")
    ap.add_argument("--out")
    args = ap.parse_args()
    import torch

    if args.device == "cpu":
        # Every core this process may use, and a deliberate thread count: what the worker process has.
        os.sched_setaffinity(0, os.sched_getaffinity(0))
        if args.threads:
            torch.set_num_threads(args.threads)
    from experiments.estimate.calibration import calibrate
    from experiments.measure.run import run_experiment

    t_start = time.time()
    load_start = os.getloadavg()
    rates = calibrate(args.device)
    print(
        f"threads {torch.get_num_threads()}, cores {sorted(os.sched_getaffinity(0))}, load {load_start}, "
        f"rates {json.dumps(rates)} ({time.time() - t_start:.1f} s)",
        flush=True,
    )
    rng = random.Random(args.seed)
    rows, draws = [], 0
    while len(rows) < args.n and draws < 50 * args.n:
        draws += 1
        try:
            cfg = draw(rng, args.device).replace(
                steps=rng.choice((2, 3, 3, 5)), timing_steps=rng.choice((3, 5, 5, 10, 20))
            )
        except ConfigError:
            continue
        est = estimate(cfg, device_type=args.device)
        load = current_load()  # as the page reads it before Run
        model = family(cfg.model, cfg.model_source, est["step"])
        step = predict_step_ms(est["step"], rates, cfg.precision, args.device, load, model)
        low_s, high_s = predict_run_s(step, cfg.steps, cfg.timing_steps, rates, est["step"]["kernels"], load)
        if (low_s + high_s) / 2 > args.max_run_s:
            continue
        result = run_experiment(cfg)
        if result.get("oom") or not result.get("step_ms"):
            continue
        measured_ms, duration = result["step_ms"]["median"], result["duration_s"]
        changed = {
            k: v
            for k, v in cfg.to_dict().items()
            if v != type(cfg)().to_dict()[k] and k not in ("device", "force", "seed")
        }
        row = {
            "config": changed,
            "load": load,
            "load_after": current_load(),
            "bound": step["bound"],
            "work": est["step"],
            "predicted": step,
            "step_p10_p90": [result["step_ms"]["p10"], result["step_ms"]["p90"]],
            "step_ms": {
                "measured": measured_ms,
                "low": step["low_ms"],
                "high": step["high_ms"],
                "where": _within(measured_ms, step["low_ms"], step["high_ms"]),
            },
            "run_s": {"measured": duration, "low": low_s, "high": high_s, "where": _within(duration, low_s, high_s)},
        }
        rows.append(row)
        if args.out:
            Path(args.out).write_text(json.dumps({"rates": rates, "rows": rows}, indent=1))
        print(
            f"{len(rows):3d} load {load:5.2f}  step {measured_ms:9.2f} ms in [{step['low_ms']:9.2f}, "
            f"{step['high_ms']:9.2f}] {row['step_ms']['where']:5}  run {duration:6.2f} s in [{low_s:6.2f}, "
            f"{high_s:6.2f}] {row['run_s']['where']:5}  {step['bound']:8} {changed}",
            flush=True,
        )
    summary = {
        "device": args.device,
        "n": len(rows),
        "seed": args.seed,
        "threads": torch.get_num_threads(),
        "cores": len(os.sched_getaffinity(0)),
        "load_start": load_start,
        "load_end": os.getloadavg(),
        "seconds": round(time.time() - t_start, 1),
    }
    for key in ("step_ms", "run_s"):
        where = [r[key]["where"] for r in rows]
        ratios = sorted(r[key]["measured"] / ((r[key]["low"] + r[key]["high"]) / 2) for r in rows)
        summary[key] = {
            "in_range": where.count("in"),
            "below": where.count("below"),
            "above": where.count("above"),
            "median_measured_over_center": statistics.median(ratios),
            "min_measured_over_center": ratios[0],
            "max_measured_over_center": ratios[-1],
        }
    if args.device == "cuda":
        # The same rows against the roofline alone (before the measured GPU efficiency scaled the work).
        where = []
        for r in rows:
            p = r["predicted"]
            center = max(p["dispatch_ms"], p["compute_ms"] + p["memory_ms"])
            where.append(_within(r["step_ms"]["measured"], center * p["range"][0], center * p["range"][1]))
        summary["step_ms_roofline_only"] = {k: where.count(k) for k in ("in", "below", "above")}
    print(json.dumps(summary, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps({"summary": summary, "rates": rates, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
