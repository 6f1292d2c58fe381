"""A class on one GPU server, at the worker: N sessions submit at once to the server's worker client (the same
`experiments.jobs.worker.WorkerClient` every browser tab uses), poll like the page does, and wait for their results.

    python benchmarks/queue_load.py --sessions 30 --out docs/load-test-h200x2.json

The browser side of a class is measured by benchmarks/load_test.py; this drives what differs on a GPU: one
worker per GPU, a two-GPU job holding both, real CUDA peaks of runs that share a server, a real CUDA
out-of-memory error, a Cancel while a run runs, and a SIGKILL of a worker process while its run runs. Bounded
in sessions and time; stops by itself. Reported: results shown / lost / errors, p50 and p95 time from submit to
result, queue positions seen, which device ran what, memory of this process, the workers and the GPUs before
and after, and whether every peak equals the same configuration run alone afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import threading
import time
from pathlib import Path

from experiments.core.units import MIB
from experiments.jobs.worker import WorkerClient

TERMINAL = ("done", "error", "cancelled")


def _rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def _configs(n: int, seed: int, cuda: bool) -> list[dict]:
    """A third of the sessions share one configuration; the rest differ."""
    rng = random.Random(seed)
    widths = [512, 1024, 2048, 4096] if cuda else [64, 128, 256]
    batches = [64, 256, 1024, 4096] if cuda else [8, 32, 64]
    shared = {"layers": 4, "width": widths[1], "batch": batches[1], "steps": 3, "timing_steps": 5}
    out = []
    for i in range(n):
        if i % 3 == 0:
            out.append(dict(shared))
        else:
            out.append(
                {
                    "layers": rng.randint(2, 8),
                    "width": rng.choice(widths),
                    "batch": rng.choice(batches),
                    "precision": rng.choice(["fp32", "amp_bf16"]),
                    "optimizer": rng.choice(["adam", "sgd"]),
                    "steps": 3,
                    "timing_steps": 5,
                }
            )
    return out


def _net(result: dict | None) -> int | None:
    if not result or result.get("peak_bytes") is None:
        return None
    return result["peak_bytes"] - (result.get("baseline_bytes") or 0)


class Session(threading.Thread):
    def __init__(self, client: WorkerClient, name: str, kind: str, params: dict, role: str, poll_s: float):
        super().__init__(name=name, daemon=True)
        self.client, self.kind, self.params, self.role, self.poll_s = client, kind, params, role, poll_s
        self.record = {"session": name, "role": role, "kind": kind, "params": params, "positions": []}
        self.started = threading.Event()
        self.cancel_at: float | None = None

    def run(self) -> None:
        t0 = time.monotonic()
        try:
            ticket = self.client.submit(self.kind, self.params, owner=self.name)
        except Exception as exc:  # noqa: BLE001 - a refused submission is a reported outcome
            self.record.update(state="refused", error=f"{type(exc).__name__}: {exc}")
            return
        while True:
            status = self.client.status(ticket)
            if status.get("position"):
                self.record["positions"].append(status["position"])
            if status["state"] == "running":
                self.started.set()
            if self.cancel_at is not None and "cancel_sent" not in self.record and time.monotonic() >= self.cancel_at:
                self.client.cancel(ticket)
                self.record["cancel_sent"] = time.monotonic() - t0
            if status["state"] in TERMINAL:
                break
            time.sleep(self.poll_s)
        result = status.get("result") or {}
        self.record.update(
            state=status["state"],
            seconds=round(time.monotonic() - t0, 2),
            error=status.get("error"),
            cached=status.get("cached"),
            net_peak=_net(result),
            oom=bool(result.get("oom")),
            device_index=(result.get("device") or {}).get("index"),
        )
        if "cancel_sent" in self.record:
            self.record["cancel_to_stop_s"] = round(self.record["seconds"] - self.record["cancel_sent"], 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=30)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--poll", type=float, default=0.7, help="seconds between a session's status polls (the page's)")
    ap.add_argument("--timeout", type=float, default=480)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if not 3 <= args.sessions <= 60:
        raise SystemExit("--sessions: between 3 and 60")
    deadline = time.monotonic() + args.timeout

    client = WorkerClient(inline=False)
    info = client.device_info(timeout=300) or {}
    cuda = info.get("type") == "cuda"
    devices = [
        {"index": d.get("index"), "name": d.get("name"), "free_mib": round((d.get("free_bytes") or 0) / MIB)}
        for d in info.get("devices") or [info]
    ]
    time.sleep(3)  # lanes for further GPUs start when lane 0 reports the count
    info = client.device_info(timeout=120) or info
    before = {
        "self_rss_mib": _rss_mib(os.getpid()),
        "workers_rss_mib": [_rss_mib(ln.proc.pid) for ln in client._lanes if ln.proc],
        "devices": devices,
    }
    n_gpus = len(client._lanes)
    print(f"device: {info.get('name')} x{n_gpus}; {args.sessions} sessions", flush=True)

    configs = _configs(args.sessions, args.seed, cuda)
    sessions = []
    for i, cfg in enumerate(configs):
        kind, role = "run", "run"
        if i == 1:
            cfg, role = (
                dict(
                    cfg,
                    budget_mb=64 if cuda else 1,
                    force=True,
                    width=4096 if cuda else 256,
                    batch=4096 if cuda else 64,
                ),
                "out of memory",
            )
        elif i == 2:
            cfg, role = (
                dict(
                    cfg, layers=8, width=4096 if cuda else 256, batch=4096 if cuda else 64, steps=20, timing_steps=200
                ),
                "cancel",
            )
        elif i == 4 and n_gpus >= 2:
            kind, role = "distributed", "two GPUs"
            cfg = {"layers": 4, "width": 1024, "batch": 256, "steps": 3, "strategy": "ddp", "world_size": 2}
        elif i == 5:
            cfg, role = (
                dict(cfg, layers=8, width=4096 if cuda else 256, batch=4096 if cuda else 64, steps=10, timing_steps=60),
                "killed worker",
            )
        sessions.append(Session(client, f"s{i:02d}", kind, cfg, role, args.poll))
    for s in sessions:
        s.start()

    killer = next(s for s in sessions if s.role == "killed worker")
    canceller = next(s for s in sessions if s.role == "cancel")
    canceller_armed = killed = False
    while any(s.is_alive() for s in sessions) and time.monotonic() < deadline:
        if not canceller_armed and canceller.started.wait(0):
            canceller.cancel_at = time.monotonic() + 1.0
            canceller_armed = True
        if not killed and killer.started.wait(0):
            time.sleep(1.0)
            lane = next((ln for ln in client._lanes if ln.running and ln.proc), None)
            if lane is not None:
                os.kill(lane.proc.pid, signal.SIGKILL)
                killed = True
        time.sleep(0.2)
    records = [s.record for s in sessions]
    lost = [r["session"] for r in records if "state" not in r]

    # Every configuration again, alone and uncached (one more timing step: the same memory, a new cache key).
    alone_equal, alone_checked = [], 0
    for r in records:
        if r.get("kind") != "run" or r.get("state") != "done" or r.get("net_peak") is None or r.get("oom"):
            continue
        if time.monotonic() > deadline:
            break
        params = dict(r["params"], timing_steps=r["params"].get("timing_steps", 5) + 1)
        ticket = client.submit("run", params, owner="alone")
        while (status := client.status(ticket))["state"] not in TERMINAL:
            time.sleep(0.1)
        alone_checked += 1
        alone_equal.append(_net(status.get("result")) == r["net_peak"])
        r["alone_net_peak"] = _net(status.get("result"))
    after_info = client.device_info(timeout=60) or {}
    after = {
        "self_rss_mib": _rss_mib(os.getpid()),
        "workers_rss_mib": [_rss_mib(ln.proc.pid) for ln in client._lanes if ln.proc],
        "devices": [
            {"index": d.get("index"), "free_mib": round((d.get("free_bytes") or 0) / MIB)}
            for d in after_info.get("devices") or [after_info]
        ],
    }

    done = [r for r in records if r.get("state") == "done"]
    times = sorted(r["seconds"] for r in done)
    summary = {
        "device": info.get("name"),
        "gpus": n_gpus,
        "sessions": len(records),
        "results_shown": len(done),
        "out_of_memory_shown": sum(1 for r in done if r.get("oom")),
        "cancelled": [r["session"] for r in records if r.get("state") == "cancelled"],
        "reported_failed": {r["session"]: r.get("error") for r in records if r.get("state") == "error"},
        "refused": {r["session"]: r.get("error") for r in records if r.get("state") == "refused"},
        "lost": lost,
        "p50_s": statistics.median(times) if times else None,
        "p95_s": times[min(len(times) - 1, int(0.95 * len(times)))] if times else None,
        "sessions_that_saw_a_position": sum(1 for r in records if r["positions"]),
        "largest_position": max((max(r["positions"]) for r in records if r["positions"]), default=0),
        "runs_per_device": {
            str(i): sum(1 for r in done if r.get("device_index") == i)
            for i in sorted({r.get("device_index") for r in done} - {None})
        },
        "cancel_to_stop_s": canceller.record.get("cancel_to_stop_s"),
        "worker_killed": killed,
        "peaks_equal_alone": f"{sum(alone_equal)} of {alone_checked}",
        "before": before,
        "after": after,
    }
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps({"summary": summary, "sessions": records}, indent=1) + "\n")


if __name__ == "__main__":
    main()
