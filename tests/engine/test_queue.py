"""The class queue (experiments/jobs/worker.py): fairness between sessions, per-session limits, closed tabs, several GPUs.

The jobs here are stand-ins (experiments.jobs.kinds.execute replaced) so that the order and overlap of jobs is
what is tested, in milliseconds; real jobs through the same client are tested in test_cli_worker.py.
"""

import threading
import time

import pytest

from experiments.core.limits import Limits
from experiments.jobs import kinds as jobs
from experiments.jobs import lanes, worker


class FakeJobs:
    """Records when each job starts and ends; a job runs until released (or cancelled)."""

    def __init__(self):
        self.started: list[str] = []
        self.events: list[tuple[str, str, float]] = []
        self.release = {}
        self.lock = threading.Lock()

    def execute(self, kind, params, progress=None, should_cancel=None):
        name = params["name"]
        gate = self.release.setdefault(name, threading.Event())
        with self.lock:
            self.started.append(name)
            self.events.append(("start", name, time.monotonic()))
        while not gate.wait(0.01):
            if should_cancel is not None and should_cancel():
                self.events.append(("cancelled", name, time.monotonic()))
                return {"cancelled": True}
        with self.lock:
            self.events.append(("end", name, time.monotonic()))
        return {"name": name}

    def go(self, name):
        self.release.setdefault(name, threading.Event()).set()


@pytest.fixture
def fake(monkeypatch):
    f = FakeJobs()
    monkeypatch.setattr(jobs, "execute", f.execute)
    return f


def _wait(cond, seconds=30.0):
    deadline = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_the_next_job_comes_from_the_session_served_least_recently(fake):
    client = worker.WorkerClient(inline=True)
    a1 = client.submit("run", {"name": "a1"}, owner="A")
    _wait(lambda: fake.started == ["a1"])
    for name in ("a2", "a3"):
        client.submit("run", {"name": name}, owner="A")
    b1 = client.submit("run", {"name": "b1"}, owner="B")  # sent last, runs next: B has not been served
    assert client.status(b1)["position"] == 1
    for name in ("a1", "b1", "a2", "a3"):
        fake.go(name)
    _wait(lambda: len(fake.started) == 4 and client.status(a1)["state"] == "done")
    assert fake.started == ["a1", "b1", "a2", "a3"]


def test_one_session_may_not_fill_the_queue(fake, monkeypatch):
    monkeypatch.setattr(worker, "LIMITS", Limits(max_queue_per_session=2))
    client = worker.WorkerClient(inline=True)
    tickets = [client.submit("run", {"name": "running"}, owner="A")]
    _wait(lambda: fake.started == ["running"])
    tickets += [client.submit("run", {"name": "q1"}, owner="A"), client.submit("run", {"name": "q2"}, owner="A")]
    with pytest.raises(worker.QueueFull) as refused:
        client.submit("run", {"name": "q3"}, owner="A")
    assert refused.value.per_session and "max_queue_per_session" in str(refused.value)
    tickets.append(client.submit("run", {"name": "other"}, owner="B"))  # another learner is not affected
    tickets.append(client.submit("run", {"name": "q1"}, owner="C"))  # joins the queued twin: no new queue entry
    for name in ("running", "q1", "q2", "other"):
        fake.go(name)
    # every job ends inside this test (a late one would run under the next test's stand-in)
    _wait(lambda: all(client.status(x)["state"] == "done" for x in tickets))


def test_jobs_of_closed_tabs_leave_the_queue_and_stop_running(fake, monkeypatch):
    monkeypatch.setattr(lanes, "ABANDON_CHECK_S", 0.02)
    gone: set[str] = set()
    client = worker.WorkerClient(inline=True)
    client.owner_alive = lambda owner: owner not in gone
    running = client.submit("run", {"name": "long"}, owner="A")
    _wait(lambda: fake.started == ["long"])
    queued = client.submit("run", {"name": "queued"}, owner="B")
    shared = client.submit("run", {"name": "shared"}, owner="C")
    client.submit("run", {"name": "shared"}, owner="D")  # joined by a learner who stays
    cli = client.submit("run", {"name": "cli"})  # no session: never considered abandoned
    gone.update({"A", "B", "C"})
    _wait(lambda: client.status(running)["state"] == "cancelled")
    assert client.status(queued)["state"] == "cancelled" and "closed" in client.status(queued)["error"]
    _wait(lambda: "shared" in fake.started)
    fake.go("shared")
    _wait(lambda: "cli" in fake.started)
    fake.go("cli")
    _wait(lambda: client.status(cli)["state"] == "done")
    assert "queued" not in fake.started and client.status(shared)["state"] == "done"


def test_lanes_run_jobs_side_by_side_and_a_multi_gpu_job_holds_every_gpu_it_uses(fake):
    client = worker.WorkerClient(inline=True)
    client.add_lane()  # a second GPU
    client.submit("run", {"name": "one"}, owner="A")
    client.submit("run", {"name": "two"}, owner="B")
    _wait(lambda: sorted(fake.started) == ["one", "two"])  # both GPUs busy at once
    dist = client.submit("distributed", {"name": "ddp", "world_size": 2, "device": "auto"}, owner="C")
    after = client.submit("run", {"name": "three"}, owner="D")
    fake.go("one")  # GPU 0 frees up, GPU 1 still busy: the 2-GPU job waits, and nothing jumps ahead of it
    time.sleep(0.2)
    assert "ddp" not in fake.started and "three" not in fake.started
    assert client.status(dist)["state"] == "queued" and client.status(after)["state"] == "queued"
    fake.go("two")
    _wait(lambda: "ddp" in fake.started)
    time.sleep(0.2)
    assert "three" not in fake.started  # both GPUs are held by the 2-GPU job
    fake.go("ddp")
    _wait(lambda: "three" in fake.started)
    fake.go("three")
    _wait(lambda: client.status(after)["state"] == "done")
    # a CPU (gloo) multi-process job needs no GPU and runs beside others
    assert worker.devices_needed("distributed", {"world_size": 2, "device": "cpu"}) == 1
