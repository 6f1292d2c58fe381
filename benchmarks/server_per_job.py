"""What the web server keeps and spends per job, at its worker client: N distinct tiny CPU runs from a few sessions
that poll like pages, through the same `WorkerClient` every browser tab uses (one worker process).

    python benchmarks/server_per_job.py --jobs 150 --out docs/server-per-job.json

Reported: this process's RSS after the first jobs and at the end (the worker is another process), its CPU seconds
per job (this process only: polls, result transfer, bookkeeping), and what the client holds at the end (jobs,
cached results and their bytes). Bounded: stops by itself after --timeout seconds.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import threading
import time
from pathlib import Path

from experiments.jobs.worker import WorkerClient

TERMINAL = ("done", "error", "cancelled")


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=150)
    ap.add_argument("--sessions", type=int, default=5)
    ap.add_argument("--poll", type=float, default=0.7)
    ap.add_argument("--warmup", type=int, default=10, help="jobs before the first memory figure")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    client = WorkerClient(inline=False, rates=False)
    assert client.device_info(timeout=300) is not None, "the worker did not start"
    deadline = time.monotonic() + args.timeout
    configs = [
        {"model": "mlp", "layers": 2, "width": 32 + 8 * (i % 50), "batch": 4 + 4 * (i // 50), "steps": 2}
        | {"timing_steps": 1, "device": "cpu"}
        for i in range(args.jobs)
    ]
    done, marks, lock = [], {}, threading.Lock()

    def session(k: int) -> None:
        for i in range(k, args.jobs, args.sessions):
            ticket = client.submit("run", configs[i], owner=f"s{k}")
            while time.monotonic() < deadline:
                status = client.status(ticket)
                if status["state"] in TERMINAL:
                    break
                time.sleep(args.poll)
            with lock:
                done.append(status["state"])
                if len(done) == args.warmup:
                    gc.collect()
                    marks["warm"] = {"rss_mib": _rss_mib(), "cpu_s": _cpu_s(), "jobs": len(done)}

    cpu0, t0 = _cpu_s(), time.monotonic()
    threads = [threading.Thread(target=session, args=(k,)) for k in range(args.sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    gc.collect()
    end = {"rss_mib": _rss_mib(), "cpu_s": _cpu_s(), "jobs": len(done)}
    warm = marks.get("warm", end)
    later = max(1, end["jobs"] - warm["jobs"])
    report = {
        "jobs": len(done),
        "states": {s: done.count(s) for s in set(done)},
        "wall_s": round(time.monotonic() - t0, 1),
        "rss_mib_after_warmup": warm["rss_mib"],
        "rss_mib_end": end["rss_mib"],
        "rss_kib_per_job_after_warmup": round((end["rss_mib"] - warm["rss_mib"]) * 1024 / later, 1),
        "cpu_s_per_job": round((end["cpu_s"] - cpu0) / max(1, len(done)), 3),
        "cpu_s_per_job_after_warmup": round((end["cpu_s"] - warm["cpu_s"]) / later, 3),
        "held": {"jobs": len(client._jobs), "cached": len(client._cache), "cache_bytes": client.cache_bytes()},
    }
    print(json.dumps(report, indent=1))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
