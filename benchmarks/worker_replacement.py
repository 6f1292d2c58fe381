"""How long a class waits when its worker is killed: from the kill to the next small job's result, with the lane's
spare worker and without it (a classroom's client: the device's rates measured, as `streamlit run` starts it).

    python benchmarks/worker_replacement.py --rounds 3 --out docs/benchmarks/worker-replacement-cpu.json

Each round kills the worker with SIGKILL in the middle of a run (as the OOM killer does), then submits a leak
scenario of a few milliseconds and times it from the kill to its result: what the next learner waits. Without a spare the replacement imports torch and measures the device's rates
again; the spare has torch imported and is told the rates its predecessor measured.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from experiments.jobs.worker import WorkerClient  # noqa: E402

LONG = {"device": "cpu", "layers": 4, "width": 512, "batch": 256, "steps": 2, "timing_steps": 200}


def _wait(check, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError
        time.sleep(0.05)


def one_client(spare: bool, rounds: int) -> list[float]:
    client = WorkerClient(inline=False, rates=True, spare=spare)
    client.device_info(timeout=600)
    lane = client._lanes[0]
    _wait(lambda: lane.device and "rates" in lane.device)
    seconds = []
    for n in range(rounds):
        if spare:
            _wait(lambda: lane.standby is not None and lane.standby.proc.is_alive())
            time.sleep(5.0)  # the spare's imports done (it waits on its queue)
        # Killed in the middle of a run, as the OOM killer picks the process that grows.
        run = client.submit("run", dict(LONG, seed=n))
        _wait(lambda r=run: client.status(r, result=False)["state"] == "running")
        os.kill(lane.proc.pid, signal.SIGKILL)
        t0 = time.monotonic()
        ticket = client.submit("leak", {"scenario": "fixed", "steps": 2, "device": "cpu", "batch": 8, "width": 8 + n})
        _wait(lambda t=ticket: client.status(t, result=False)["state"] not in ("queued", "running"))
        assert client.status(ticket, result=False)["state"] == "done", client.status(ticket)
        seconds.append(round(time.monotonic() - t0, 2))
        print(f"spare={spare} round {n + 1}: {seconds[-1]} s", file=sys.stderr, flush=True)
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out")
    ap.add_argument(
        "--only", choices=("with_spare", "without_spare"), help="one server (each runs in a process of its own)"
    )
    args = ap.parse_args()
    if args.only:
        print(json.dumps(one_client(args.only == "with_spare", args.rounds)))
        return
    out = {"cores": len(os.sched_getaffinity(0)), "load_at_start": os.getloadavg()[0]}
    for variant in ("with_spare", "without_spare"):
        # A server of its own for each, so that the first one's processes and device lock are gone.
        cmd = [sys.executable, __file__, "--rounds", str(args.rounds), "--only", variant]
        runs = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
        out[variant] = {"seconds": runs, "median_s": statistics.median(runs)}
    print(json.dumps(out, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
