"""A killed worker is replaced by the lane's spare at once, with the rates its predecessor measured on the device.

A class's server on 2 loaded cores took 40-74 s to replace a killed worker (torch imported and the device's rates
measured again), and every learner's run waited behind it."""

from __future__ import annotations

import os
import signal
import time

from experiments.jobs.worker import WorkerClient

TINY = {"scenario": "fixed", "steps": 2, "device": "cpu", "batch": 8, "width": 16}
LONG = {"device": "cpu", "layers": 4, "width": 512, "batch": 256, "steps": 2, "timing_steps": 200}  # seconds of work


def _until(check, timeout: float, what: str):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _comm(pid: int) -> str:
    with open(f"/proc/{pid}/comm") as f:
        return f.read().strip()


def _done(client, ticket, timeout=180):
    _until(lambda: client.status(ticket)["state"] not in ("queued", "running"), timeout, "the job to end")
    return client.status(ticket)


def _spare(lane):
    return _until(lambda: lane.standby if lane.standby and lane.standby.proc.is_alive() else None, 120, "a spare")


def test_the_spare_takes_over_a_killed_workers_lane_with_its_rates():
    client = WorkerClient(inline=False, rates=False, spare=True)
    assert client.device_info()["type"] == "cpu"
    lane = client._lanes[0]
    spare = _spare(lane)
    # The spare waits without a device: it has reported nothing, and it is not the lane's worker (nor named as it).
    assert spare.proc.pid != lane.proc.pid and spare.inbox.empty()
    assert _until(lambda: _comm(spare.proc.pid) == "gml-spare", 30, "its name") and _comm(lane.proc.pid) == "gml-worker"
    with client.lock:  # as if the first worker had measured the device's rates
        lane.device = dict(lane.device, rates={"op_us": 12.5})

    first = lane.proc.pid
    os.kill(first, signal.SIGKILL)
    # Killed between jobs, it is replaced by the spare as soon as the lane sees it, before any job asks.
    _until(lambda: lane.proc.pid != first, 30, "the replacement")
    assert lane.proc.pid == spare.proc.pid
    done = _done(client, client.submit("leak", TINY))
    assert done["state"] == "done" and done["result"]["growth_bytes_per_step"] == 0 and not done["retried"]
    assert lane.proc.pid == spare.proc.pid  # the spare ran it, not a fresh process
    assert _comm(lane.proc.pid) == "gml-worker"  # named as the worker now (the load test kills it by that name)
    # Its device report carries the predecessor's rates instead of measuring them again.
    _until(lambda: lane.device.get("rates") == {"op_us": 12.5} and lane.device.get("type") == "cpu", 30, "a report")
    # And a new spare is made ready for the next death, once the lane is idle.
    assert _spare(lane).proc.pid not in (first, spare.proc.pid)


def test_a_worker_killed_mid_job_hands_the_job_to_the_spare_which_runs_it_for_every_learner_who_joined():
    """A load test's kill hit a job that 8 learners had joined: each was told the worker died. The spare takes the job
    over and runs it again from the start; both learners get the result of the configuration run alone."""
    client = WorkerClient(inline=False, rates=False, spare=True)
    client.device_info()
    lane = client._lanes[0]
    spare = _spare(lane)
    first, joined = client.submit("run", LONG), client.submit("run", LONG)
    _until(lambda: client.status(first)["state"] == "running" and client.status(first)["progress"], 120, "the run")
    killed = lane.proc.pid
    os.kill(killed, signal.SIGKILL)
    # The spare took the lane over when the death was seen and runs the job again.
    _until(lambda: lane.proc.pid == spare.proc.pid, 30, "the spare to take over")
    done, other = _done(client, first, 300), _done(client, joined, 300)
    assert done["state"] == other["state"] == "done", (done.get("error"), other.get("error"))
    assert done["retried"] and other["retried"]  # what the page's progress said while it ran again
    alone = WorkerClient(inline=True)
    ref = _done(alone, alone.submit("run", LONG), 300)["result"]
    assert done["result"]["peak_bytes"] == other["result"]["peak_bytes"] == ref["peak_bytes"]
    assert lane.proc.pid == spare.proc.pid and lane.proc.is_alive()


def test_a_job_whose_worker_dies_twice_fails_and_the_next_job_runs():
    """A second death is taken for the job's own doing (its memory, a crash it causes): it is not tried a third time."""
    client = WorkerClient(inline=False, rates=False, spare=True)
    client.device_info()
    lane = client._lanes[0]
    _spare(lane)
    long = client.submit("run", LONG)
    for _ in range(2):
        _until(lambda: client.status(long)["state"] == "running" and client.status(long)["progress"], 120, "the run")
        killed = lane.proc.pid
        os.kill(killed, signal.SIGKILL)
        _until(lambda k=killed: lane.proc.pid != k or client.status(long)["state"] != "running", 60, "the death seen")
    died = _done(client, long)
    assert died["state"] == "error" and died["error_info"]["type"] == "WorkerDied" and died["retried"]
    assert "twice" in died["error"]
    assert lane.proc.is_alive()
    assert _done(client, client.submit("leak", dict(TINY, width=24)))["state"] == "done"


def test_a_lane_keeps_no_spare_when_told_not_to(monkeypatch):
    monkeypatch.setenv("GPU_MEMORY_LAB_SPARE_WORKER", "0")
    client = WorkerClient(inline=False)  # a classroom's client (rates measured), the operator's switch off
    assert client._lanes[0].spare is False
    assert WorkerClient(inline=False, rates=False)._lanes[0].spare is False  # tests' clients keep none


def test_a_spare_that_dies_waiting_is_not_started_again_and_again(caplog):
    client = WorkerClient(inline=False, rates=False, spare=True)
    client.device_info()
    lane = client._lanes[0]
    spare = _spare(lane)
    with caplog.at_level("WARNING", logger="experiments.jobs.lanes"):
        os.kill(spare.proc.pid, signal.SIGKILL)
        _until(lambda: lane.spare is False, 30, "the lane to give up its spare")
    assert lane.standby is None and any("spare worker" in r.getMessage() for r in caplog.records)
    time.sleep(1.5)  # the dispatcher tends the lane every half second: it starts no other
    assert lane.standby is None
    assert _done(client, client.submit("leak", TINY))["state"] == "done"  # the worker itself serves on


SERVER_EXITS = """
import sys, time
from multiprocessing import util
from experiments.jobs.worker import WorkerClient
from experiments.jobs import estimates
if __name__ == "__main__":
    client = WorkerClient(inline=False, rates=False, spare=True)
    client.device_info()
    pool = estimates.EstimatePool(processes=1)
    pool.warm(120)
    lane = client._lanes[0]
    deadline = time.time() + 60
    while lane.standby is None and time.time() < deadline:
        time.sleep(0.05)
    children = [lane.proc, lane.standby.proc, pool._slots[0].proc]
    # Runs where multiprocessing unlinks its queues' semaphores (a finalizer of priority 0, at exit)
    util.Finalize(None, lambda: print("alive when the semaphores go:", [c.is_alive() for c in children], flush=True),
                  exitpriority=0)
    sys.exit(0)
"""


def test_a_stopping_server_stops_its_children_before_their_queues_semaphores_go(tmp_path):
    """At exit multiprocessing unlinks its queues' semaphores before it stops its daemonic children; a child still
    starting then (a spare spawned a moment before Ctrl-C) cannot rebuild its queue and prints a FileNotFoundError
    traceback in the operator's terminal. The lab stops its worker, spare and estimate processes first
    (experiments/jobs/process_exit.py)."""
    import subprocess
    import sys

    script = tmp_path / "server.py"
    script.write_text(SERVER_EXITS)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=240,
        env=dict(os.environ, PYTHONPATH=root),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "alive when the semaphores go: [False, False, False]" in done.stdout, (done.stdout, done.stderr[-2000:])
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
