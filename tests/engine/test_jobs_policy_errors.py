"""The class queue's policy as pure functions (experiments/jobs/policy.py) and a job's structured errors
(experiments/jobs/errors.py), without processes or threads."""

from __future__ import annotations

import time

import pytest
import torch

from experiments.core.config import ConfigError, ExperimentConfig
from experiments.jobs import errors, policy, worker
from experiments.measure.fits import WouldNotFit, check_fits
from experiments.measure.phases import Cancelled


def _jobs(*rows):
    """(id, owner, seq) -> the job table the policy reads."""
    return {job_id: {"owner": owner, "seq": seq} for job_id, owner, seq in rows}


def test_fair_order_serves_the_session_served_least_recently_first():
    jobs = _jobs(("a1", "A", 0), ("a2", "A", 1), ("b1", "B", 2), ("cli", None, 3), ("c1", "C", 4))
    served = {"A": 10.0, "C": 5.0}  # A's last job started after C's; B was never served
    assert policy.fair_order(["a1", "a2", "b1", "cli", "c1"], jobs, served) == ["b1", "cli", "c1", "a1", "a2"]
    # A session's own jobs keep their order, whatever order the pending list is in.
    assert policy.fair_order(["a2", "a1"], jobs, served) == ["a1", "a2"]


def test_next_job_takes_the_head_of_the_queue_on_a_free_lane():
    assert policy.next_job(0, [True], [("j1", 1), ("j2", 1)]) == ("j1", [])
    assert policy.next_job(1, [False, True], [("j1", 1)]) == ("j1", [])
    assert policy.next_job(0, [True], []) is None
    # A job asking for more GPUs than there are runs on all of them.
    assert policy.next_job(0, [True], [("big", 4)]) == ("big", [])


def test_a_multi_gpu_job_at_the_head_holds_back_the_lanes_it_needs():
    queue = [("ddp", 2), ("small", 1)]
    # Lane 0 free, lane 1 busy: lane 0 waits for lane 1 rather than start the small job behind the 2-GPU one.
    assert policy.next_job(0, [True, False, True], queue) is None
    assert policy.next_job(1, [False, True, True], queue) is None  # lane 1 is one of the two the job uses
    # Lane 2 is not among them: it takes the next job that fits.
    assert policy.next_job(2, [False, False, True], queue) == ("small", [])
    # Both lanes free: lane 0 starts it and holds lane 1.
    assert policy.next_job(0, [True, True, True], queue) == ("ddp", [1])


def test_the_policy_reads_candidates_lazily():
    """The client drops abandoned jobs while it hands them over: the policy stops at the one it takes."""
    seen = []

    def candidates():
        for job in [("j1", 1), ("j2", 1)]:
            seen.append(job[0])
            yield job

    assert policy.next_job(0, [True], candidates()) == ("j1", [])
    assert seen == ["j1"]


def test_error_info_of_each_kind_of_failure():
    with pytest.raises(ConfigError) as config:
        ExperimentConfig.from_dict({"batch": 7, "accum": 2})
    assert errors.describe(config.value) == {
        "type": "ConfigError",
        "code": "batch_accum",
        "params": {"field": "batch", "batch": 7, "accum": 2},
    }
    with pytest.raises(WouldNotFit) as refused:
        check_fits(ExperimentConfig(device="cpu", layers=4, width=4096, batch=4096, budget_mb=8), torch.device("cpu"))
    info = errors.describe(refused.value)
    assert (info["type"], info["code"]) == ("WouldNotFit", "capacity")
    assert info["params"]["available_bytes"] == 8 * 2**20 < info["params"]["peak_bytes"]
    assert errors.describe(torch.OutOfMemoryError("x")) == {"type": "OutOfMemory", "code": None, "params": {}}
    assert errors.describe(Cancelled()) == {"type": "Cancelled", "code": None, "params": {}}
    assert errors.describe(KeyError("k")) == {"type": "Internal", "code": None, "params": {"class": "KeyError"}}
    assert errors.message(KeyError("k")) == "KeyError: 'k'"
    # Parameters cross a process boundary and reach a page: plain values only.
    assert errors.info("Timeout", seconds=1.5, at=object())["params"]["at"].startswith("<object")
    with pytest.raises(ValueError, match="error type"):
        errors.info("Oops")


def test_a_full_queue_says_which_limit_it_hit(monkeypatch):
    from experiments.core.limits import Limits

    monkeypatch.setattr(worker, "LIMITS", Limits(max_queue=1, max_queue_per_session=1))
    client = worker.WorkerClient(inline=True)
    client._lanes[0].running = "busy"  # the lane never takes a job: everything stays queued
    client.submit("leak", {"scenario": "fixed", "steps": 2}, owner="A")
    with pytest.raises(worker.QueueFull) as full:
        client.submit("leak", {"scenario": "fixed", "steps": 3}, owner="B")
    assert errors.describe(full.value) == {"type": "QueueFull", "code": "full", "params": {"limit": 1}}
    monkeypatch.setattr(worker, "LIMITS", Limits(max_queue=9, max_queue_per_session=1))
    with pytest.raises(worker.QueueFull) as mine:
        client.submit("leak", {"scenario": "fixed", "steps": 4}, owner="A")
    assert errors.describe(mine.value) == {"type": "QueueFull", "code": "per_session", "params": {"limit": 1}}


def test_a_failed_inline_job_keeps_its_message_and_carries_its_error_as_data():
    client = worker.WorkerClient(inline=True)
    ticket = client.submit("run", {"device": "cpu", "batch": 7, "accum": 2})  # refused before anything runs
    stop = time.time() + 60
    while client.status(ticket)["state"] in ("queued", "running"):
        assert time.time() < stop
        time.sleep(0.02)
    status = client.status(ticket)
    assert status["state"] == "error"
    assert status["error"] == ("ConfigError: batch: batch 7 must be divisible by accum 2 (micro-batch = batch / accum)")
    assert status["error_info"] == {
        "type": "ConfigError",
        "code": "batch_accum",
        "params": {"field": "batch", "batch": 7, "accum": 2},
    }
    assert client.status("no such ticket")["error_info"]["code"] == "unknown_job"


def test_the_engines_refusals_survive_a_process_pool():
    """A process pool sends a worker's exception back pickled; these once failed to unpickle (their constructors do
    not take the message alone) and broke the pool instead of reporting the refusal."""
    import concurrent.futures
    import pickle

    from experiments.core.errors import CannotPredict

    refusals = [
        ConfigError("batch", "an integer in [1, 4096]", "range", value=0, lo=1, hi=4096),
        WouldNotFit("too big", {"peak_bytes": 5}, "capacity", need=5, have=4),
        CannotPredict({"op": "aten.x", "message": "aten.x cannot be replayed", "reason": "r"}),
    ]
    for e in refusals:
        back = pickle.loads(pickle.dumps(e))
        assert type(back) is type(e) and str(back) == str(e) and back.__dict__ == e.__dict__
    with concurrent.futures.ProcessPoolExecutor(max_workers=1) as pool:
        with pytest.raises(ConfigError) as got:
            pool.submit(_refuse).result()
    assert got.value.field == "batch" and got.value.params == {"value": 0, "lo": 1, "hi": 4096}


def _refuse():
    raise ConfigError("batch", "an integer in [1, 4096]", "range", value=0, lo=1, hi=4096)
