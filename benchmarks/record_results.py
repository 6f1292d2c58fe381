"""Record real GPU results for everything the lessons say, so learners without a GPU see them and the tests
can check every prompt and every quoted number against them (docs/expectations.md).

    python benchmarks/record_results.py --out recorded/h200 [--only ID_PREFIX ...]
Writes one JSON file per experiment ({"id", "lesson", "label", "kind", "params", "result"}); the jobs and
their ids follow from lessons/*/meta.json alone (course/content.py: record_jobs).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from course import catalog  # noqa: E402
from course.recordings import all_jobs, device_params  # noqa: E402
from experiments.core.timeline import shrink  # noqa: E402
from experiments.core.units import MIB  # noqa: E402
from experiments.jobs.kinds import execute  # noqa: E402

# Recorded runs whose raw allocator snapshot ships with the app (gzip; the page offers it unpacked for memory_viz).
SNAPSHOT_IDS = (catalog.TIMELINE_RECORDING,)
HISTORY_EVENTS = 400  # timeline events kept per other recording (coalesced: the peak and final level stay exact)


def keep_history(job_id: str, result: dict, out: Path) -> None:
    """A run's timeline, bounded for the repository; its snapshot file copied next to it, or dropped (the
    worker's temp path means nothing on another machine)."""
    history = result.get("history")
    if not history or history.get("error"):
        return
    snap = history.get("snapshot") or {}
    if job_id in SNAPSHOT_IDS and snap.get("path") and Path(snap["path"]).exists():
        name = f"{job_id}.snapshot.pickle.gz"
        (out / name).write_bytes(gzip.compress(Path(snap["path"]).read_bytes()))
        history["snapshot"] = {"recorded": name, "bytes": snap.get("bytes")}
    else:
        history["snapshot"] = None
    if job_id not in SNAPSHOT_IDS:
        result["history"] = shrink(history, HISTORY_EVENTS)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "recorded" / catalog.RECORDED_FOLDER))
    ap.add_argument("--only", nargs="*", default=None, help="record only ids starting with one of these")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for job in all_jobs():
        if args.only and not any(job["id"].startswith(p) for p in args.only):
            continue
        params = device_params(job, "cuda")
        t0 = time.time()
        try:
            result = execute(job["kind"], params)
        except Exception as e:  # noqa: BLE001 - record what failed and go on with the rest
            failed += 1
            print(f"{job['id']}: FAILED {type(e).__name__}: {e}", flush=True)
            continue
        if result.get("memory_summary"):
            result["memory_summary"] = result["memory_summary"][:20000]
        keep_history(job["id"], result, out)
        (out / f"{job['id']}.json").write_text(json.dumps({**job, "params": params, "result": result}, default=str))
        peak = result.get("peak_bytes")
        print(f"{job['id']}: {time.time() - t0:.1f} s" + (f", peak {peak / MIB:.1f} MiB" if peak else ""), flush=True)
        for p in result.get("paired") or []:  # timing rounds: each strategy against the first, round by round
            if p:
                print(
                    f"  {p['strategy']} / {p['versus']}: {p['median']:.3f} ({p['lo']:.3f}-{p['hi']:.3f} over "
                    f"{p['rounds']} rounds) {p['verdict']}",
                    flush=True,
                )
    print(f"{failed} failed")


if __name__ == "__main__":
    main()
