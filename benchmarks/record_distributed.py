"""Record the multi-GPU lesson's data-parallel runs (lessons/multigpu/meta.json), per rank.

    python3 benchmarks/record_distributed.py --device cuda --out recorded/h200x2   # a machine with 2 GPUs
    python3 benchmarks/record_distributed.py --device cuda --only fsdp2_offload     # only these strategy ids
    python3 benchmarks/record_distributed.py --device cpu --out recorded/cpu-gloo  # gloo, 2 processes
    python3 benchmarks/record_distributed.py --estimates-only recorded/h200x2 --workspaces docs/benchmarks/workspaces-h200.json
The last recomputes the per-rank estimate stored with each recording (the estimator changed, the runs did not);
it needs no GPU.
Writes one JSON file per strategy ({"id", "lesson", "label", "kind": "distributed", "params", "result"}), ids
`multigpu-<recording>-<strategy id>`; strategies marked "devices" are recorded only on those devices.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from course.recordings import data_parallel_jobs, device_params  # noqa: E402
from experiments.core.units import MIB  # noqa: E402
from experiments.distributed.launch import run_distributed_many  # noqa: E402


def estimates_only(folder: Path, workspaces: Path | None) -> None:
    from experiments.core.config import DistributedConfig
    from experiments.distributed.estimate import estimate_sharded
    from experiments.estimate.workspaces import load

    table = load(workspaces) if workspaces else {}
    for path in sorted(folder.glob("*.json")):
        entry = json.loads(path.read_text(encoding="utf-8"))
        result = entry["result"]
        device_type = "cuda" if (result.get("device") or {}).get("type") == "cuda" else "cpu"
        est = estimate_sharded(DistributedConfig.from_dict(entry["params"]), device_type=device_type, transients=table)
        result["estimate"] = json.loads(json.dumps(est, default=str))
        path.write_text(json.dumps(entry, indent=1, default=str) + "\n", encoding="utf-8")
        worst = max(r["peak_bytes"] - r["baseline_bytes"] for r in result["ranks"])
        print(
            f"{entry['id']}: measured {worst / MIB:.2f} MiB; estimate {est['peak_bytes'] / MIB:.2f}"
            f"–{est.get('peak_high_bytes', est['peak_bytes']) / MIB:.2f} MiB ({est['method']})",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", choices=("cuda", "cpu"))
    ap.add_argument("--out", default=None, help="default: recorded/<the lesson's recording name for the device>")
    ap.add_argument("--estimates-only", type=Path, help="a folder of recordings: recompute their estimates")
    ap.add_argument("--workspaces", type=Path, help="with --estimates-only: the GPU's scratch-memory table")
    ap.add_argument("--only", nargs="*", default=None, help="record only these strategy ids of the lesson")
    args = ap.parse_args()
    if args.estimates_only:
        estimates_only(args.estimates_only, args.workspaces)
        return
    if not args.device:
        ap.error("--device is required")
    jobs = [dict(job, params=device_params(job)) for job in data_parallel_jobs(args.device)]
    out = Path(args.out) if args.out else ROOT / "recorded" / jobs[0]["folder"]
    if args.only is not None:
        unknown = set(args.only) - {job["strategy_id"] for job in jobs}
        if unknown:
            ap.error(f"--only: unknown strategy ids {sorted(unknown)}; known: {[j['strategy_id'] for j in jobs]}")
        jobs = [job for job in jobs if job["strategy_id"] in args.only]
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    # One launch per strategy: ranks that ran another strategy before would carry its leftovers into the baseline.
    results = [run_distributed_many([job["params"]])[0] for job in jobs]
    failed = 0
    for job, result in zip(jobs, results, strict=True):
        entry = {k: job[k] for k in ("id", "lesson", "label", "kind", "params")} | {"result": result}
        (out / f"{job['id']}.json").write_text(json.dumps(entry, indent=1, default=str) + "\n", encoding="utf-8")
        peaks = ", ".join(
            f"rank {r['rank']} {(r['peak_bytes'] - r['baseline_bytes']) / MIB:.2f} MiB net"
            for r in result["ranks"]
            if r.get("peak_bytes") is not None
        )
        update = result.get("update_check") or {}
        ok = not result["errors"] and update.get("ok") is not False
        failed += not ok
        print(
            f"{job['id']}: {peaks}; estimate {result['estimate']['peak_bytes'] / MIB:.2f} MiB; "
            f"update {'ok' if update.get('ok') else update or '-'}; step "
            f"{(result.get('step_ms') or {}).get('median', float('nan')):.2f} ms"
            + (f"; ERRORS {result['errors']}" if result["errors"] else ""),
            flush=True,
        )
    print(f"{len(jobs)} recorded to {out} in {time.time() - t0:.0f} s, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
