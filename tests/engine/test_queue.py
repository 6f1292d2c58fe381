"""The class queue (experiments/jobs/worker.py): fairness between sessions, per-session limits, closed tabs, several GPUs.

The jobs here are stand-ins (experiments.jobs.kinds.execute replaced) so that the order and overlap of jobs is
what is tested, in milliseconds; real jobs through the same client are tested in test_cli_worker.py.
"""

import dataclasses
import sys
import threading
import time

import pytest

from experiments.core.config import ConfigError, ExperimentConfig
from experiments.core.limits import Limits
from experiments.jobs import admission, lanes, worker
from experiments.jobs import kinds as jobs


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
    monkeypatch.setattr(worker, "TAB_GRACE_S", 0.05)
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
    _wait(lambda: client.status(queued)["state"] == "cancelled")
    assert "closed" in client.status(queued)["error"]
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


def test_a_failed_or_cancelled_job_is_never_served_to_the_next_learner(fake, monkeypatch):
    client = worker.WorkerClient(inline=True)
    outcomes = iter([{"errors": ["rank 1: not every rank reported"]}, {"cancelled": True}, {"name": "ok"}])
    monkeypatch.setattr(
        fake, "execute", lambda kind, params, progress=None, should_cancel=None: next(outcomes), raising=False
    )
    monkeypatch.setattr(jobs, "execute", fake.execute)
    states = []
    for owner in ("A", "B", "C", "D"):
        ticket = client.submit("distributed", {"name": "same"}, owner=owner)
        _wait(lambda t=ticket: client.status(t)["state"] not in ("queued", "running"))
        status = client.status(ticket)
        states.append((status["state"], status["cached"], status["result"]))
    # the failure and the cancel ran again for the next learner; only the good result is served from the cache
    assert states[0] == ("done", False, {"errors": ["rank 1: not every rank reported"]})
    assert states[1][:2] == ("cancelled", False)
    assert states[2] == ("done", False, {"name": "ok"})
    assert states[3] == ("done", True, {"name": "ok"})


def test_run_just_after_another_learners_cancel_of_the_same_configuration_gets_a_run(fake):
    client = worker.WorkerClient(inline=True)
    a = client.submit("run", {"name": "same"}, owner="A")
    _wait(lambda: fake.started == ["same"])
    fake.release["same"].clear()
    client.cancel(a)  # the running job is being stopped ...
    b = client.submit("run", {"name": "same"}, owner="B")  # ... and B asks for the same configuration now
    _wait(lambda: client.status(a)["state"] == "cancelled")
    _wait(lambda: fake.started == ["same", "same"])  # B's own run
    fake.go("same")
    _wait(lambda: client.status(b)["state"] == "done")
    assert client.status(b)["result"] == {"name": "same"}


def test_the_result_cache_is_bounded_by_bytes(fake, monkeypatch):
    monkeypatch.setattr(worker, "CACHE_BYTES", 3 * 2**20)
    client = worker.WorkerClient(inline=True)
    big = "x" * 2**20  # each result about 1 MiB
    monkeypatch.setattr(
        jobs, "execute", lambda kind, params, progress=None, should_cancel=None: {"blob": big, "n": params["name"]}
    )
    for n in range(6):
        ticket = client.submit("run", {"name": n}, owner="A")
        _wait(lambda t=ticket: client.status(t)["state"] == "done")
    assert 2 * 2**20 < client.cache_bytes() <= 3 * 2**20
    assert client.status(client.submit("run", {"name": 5}, owner="B"))["cached"]  # the newest are kept
    assert not client.status(client.submit("run", {"name": 0}, owner="B"))["cached"]  # the oldest went


def test_an_unpicklable_parameter_is_refused_at_submit_naming_it(fake):
    client = worker.WorkerClient(inline=True)
    with pytest.raises(ConfigError) as refused:
        client.submit("run", {"name": "x", "hook": lambda: None}, owner="A")
    assert refused.value.field == "hook" and "cannot be sent to the worker" in str(refused.value)
    assert client.queue_length() == 0


def test_a_network_blip_does_not_cancel_a_running_run_a_closed_tab_does(fake, monkeypatch):
    monkeypatch.setattr(lanes, "ABANDON_CHECK_S", 0.02)
    monkeypatch.setattr(worker, "TAB_GRACE_S", 1.5)
    gone: set[str] = set()
    client = worker.WorkerClient(inline=True)
    client.owner_alive = lambda owner: owner not in gone
    run = client.submit("run", {"name": "blip"}, owner="A")
    _wait(lambda: fake.started == ["blip"])
    gone.add("A")  # the connection drops for 0.5 s, checked 25 times meanwhile
    time.sleep(0.5)
    gone.discard("A")
    time.sleep(0.2)
    assert client.status(run)["state"] == "running"
    gone.add("A")  # and now for good: cancelled once the grace has passed
    t0 = time.monotonic()
    _wait(lambda: client.status(run)["state"] == "cancelled", 30)
    assert time.monotonic() - t0 >= 1.4


def test_results_are_held_once_pickled_and_a_poll_without_the_result_reads_none(fake, monkeypatch):
    client = worker.WorkerClient(inline=True)
    result = {"timeline": [{"t": i, "bytes": i * 512} for i in range(20_000)]}
    monkeypatch.setattr(jobs, "execute", lambda kind, params, progress=None, should_cancel=None: result)
    a = client.submit("run", {"name": "big"}, owner="A")
    _wait(lambda: client.status(a, result=False)["state"] == "done")
    b = client.submit("run", {"name": "big"}, owner="B")  # served from the cache
    assert client.status(b, result=False)["result"] is None and client.status(b)["cached"]
    assert client.status(a)["result"] == result == client.status(b)["result"]
    held = client._jobs[client._tickets[b]]["blob"]
    assert held is client._jobs[a]["blob"] and isinstance(held, bytes)  # one copy, shared by both jobs
    assert len(held) < sys.getsizeof(result["timeline"]) + sum(sys.getsizeof(e) for e in result["timeline"])


def test_a_fresh_submission_runs_again_where_the_cache_holds_the_same_job(fake):
    """A timing that decides a grade is measured now: never served from an earlier run's cache entry."""
    client = worker.WorkerClient(inline=True)
    fake.go("timed")
    first = client.submit("timing_rounds", {"name": "timed"}, owner="A")
    _wait(lambda: client.status(first)["state"] == "done")
    assert client.status(client.submit("timing_rounds", {"name": "timed"}, owner="B"))["cached"]
    again = client.submit("timing_rounds", {"name": "timed"}, owner="B", fresh=True)
    _wait(lambda: client.status(again)["state"] == "done")
    assert not client.status(again)["cached"] and fake.started == ["timed", "timed"]


def test_two_different_requests_never_share_a_cached_result(fake):
    """The result cache's key from both sides: the same kind and parameters are served from the cache; the same
    parameters of another kind, or with one more parameter, run on their own."""
    client = worker.WorkerClient(inline=True)
    fake.go("k")
    first = client.submit("run", {"name": "k", "batch": 1}, owner="A")
    _wait(lambda: client.status(first)["state"] == "done")
    assert client.status(client.submit("run", {"batch": 1, "name": "k"}, owner="B"))["cached"]
    others = (
        ("guard", {"name": "k", "batch": 1}),
        ("run", {"name": "k", "batch": 2}),
        ("run", {"name": "k", "batch": 1, "seed": 1}),
    )
    for kind, params in others:
        ticket = client.submit(kind, params, owner="B")
        _wait(lambda t=ticket: client.status(t)["state"] == "done")
        assert not client.status(ticket)["cached"], (kind, params)
    assert fake.started == ["k", "k", "k", "k"]


def test_every_parameter_of_a_real_configuration_is_part_of_the_jobs_key():
    """A page's run is one ExperimentConfig: a key that left out any of its fields would serve one learner's result
    for another's configuration."""
    params = dataclasses.asdict(ExperimentConfig())
    key = admission.job_key("run", params)
    for name, value in params.items():
        changed = dict(params, **{name: _another(value)})
        assert admission.job_key("run", changed) != key, name


def _another(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    return f"{value}-other"


def test_a_poll_waits_for_the_end_and_returns_the_moment_it_comes(fake):
    """wait_ended: a page's poll sees a result when the worker reports it, not at its next poll."""
    client = worker.WorkerClient(inline=True)
    a = client.submit("run", {"name": "a"}, owner="A")
    b = client.submit("run", {"name": "b"}, owner="A")
    _wait(lambda: "a" in fake.started)
    t0 = time.monotonic()
    assert not client.wait_ended([a], 0.2)  # still running: the whole timeout, then False
    assert time.monotonic() - t0 >= 0.2
    threading.Timer(0.1, fake.go, args=("a",)).start()
    t0 = time.monotonic()
    assert client.wait_ended([a], 10.0)
    assert time.monotonic() - t0 < 5.0 and client.status(a)["state"] == "done"
    assert not client.wait_ended([a, b], 0.05)  # a group ends when every job of it has ended
    fake.go("b")
    assert client.wait_ended([a, b], 10.0)
    assert client.wait_ended(["no-such-ticket"], 0.0)  # unknown: nothing to wait for
