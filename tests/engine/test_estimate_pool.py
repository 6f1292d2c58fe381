"""Estimates off the web server's threads (experiments/jobs/estimates.py): another session's long estimate never
holds a page, an estimate past the time limit is refused naming it, and one whose tab went is stopped.

The long estimate is a stand-in (time.sleep in an estimate process: what matters is that it runs elsewhere and
holds a process); the page's own estimate is a real replay. Cheap: two processes, stopped at the end.
"""

from __future__ import annotations

import time

import pytest

from experiments.core.config import ExperimentConfig
from experiments.jobs import estimates

CFG = ExperimentConfig(device="cpu", layers=2, width=128, batch=8)


@pytest.fixture
def pool():
    p = estimates.EstimatePool(processes=2, max_seconds=120, grace_s=1.0)
    assert p.warm(240), "the estimate processes did not start"
    yield p
    p.close()


def test_a_page_opens_in_about_a_second_while_another_session_estimates_for_minutes(pool):
    gone: set[str] = set()
    pool.owner_alive = lambda owner: owner not in gone
    long = pool.request(("long",), "time:sleep", (300,), owner="A")  # another tab's expensive estimate
    time.sleep(1.0)
    assert not long.done()
    waits, est = [], estimates.PENDING
    deadline = time.monotonic() + 120
    while est is estimates.PENDING:  # the page: asks, waits at most 0.8 s, shows "estimating", polls
        t0 = time.monotonic()
        est = pool.estimate(CFG, None, "cpu", None, owner="B", wait=0.8)
        waits.append(time.monotonic() - t0)
        assert time.monotonic() < deadline, "the page's estimate never came"
    assert max(waits) < 2.0, waits  # no page render waits for the other session's estimate
    assert est["peak_bytes"] > 0 and not long.done()
    assert pool.estimate(CFG, None, "cpu", None, owner="C", wait=0) == est  # one cache: ready at once
    gone.add("A")  # A's tab closes: its estimate is stopped, its process replaced
    with pytest.raises(estimates.EstimateCancelled):
        long.result(timeout=30)


def test_an_estimate_is_replayed_once_whatever_capacity_it_is_judged_against(pool):
    """A device's free memory moves after every run: the page asks again with another capacity, and must not wait
    for a second replay of the same configuration (compare's seven estimates held its result's page run 2-3 s)."""
    est = pool.estimate(CFG, None, "cpu", None, wait=None)
    peak = est["peak_bytes"]
    assert est["fits"] is None and est["capacity_bytes"] is None
    for capacity, fits in ((peak, True), (peak - 1, False), (10 * peak, True)):
        judged = pool.estimate(CFG, capacity, "cpu", None, wait=0)  # no replay: ready at once
        assert judged is not estimates.PENDING, capacity
        assert (judged["capacity_bytes"], judged["fits"], judged["peak_bytes"]) == (capacity, fits, peak)
    assert est["fits"] is None  # the cached estimate itself is not changed by a verdict


def test_an_estimate_past_the_time_limit_is_refused_naming_it(pool, monkeypatch):
    pool.max_seconds = 1.5
    with pytest.raises(estimates.EstimateTooLong, match=r"more than 1.5 s to estimate"):
        pool.request(("slow",), "time:sleep", (300,), owner="A").result(timeout=60)
    pool.max_seconds = 120
    assert pool.request(("next",), "math:factorial", (5,), owner="A").result(timeout=120) == 120  # served again
    # The refusal is an answer: the page's next poll gets it at once, not a new 1.5-second replay ...
    t0 = time.monotonic()
    with pytest.raises(estimates.EstimateTooLong):
        pool.request(("slow",), "math:factorial", (6,), owner="A").result(timeout=60)
    assert time.monotonic() - t0 < 0.5
    # ... for a while: the machine may be less busy later.
    monkeypatch.setattr(estimates, "REFUSAL_KEEP_S", 0.0)
    assert pool.request(("slow",), "math:factorial", (6,), owner="A").result(timeout=60) == 720


def test_the_engines_refusal_is_kept_and_a_dead_process_is_not(pool):
    """An error the estimator raises is its answer for that configuration: served from the cache. A process that died
    says nothing about the configuration: the next request computes it."""
    first = pool.request(("bad",), "math:sqrt", (-1,), owner="A")
    with pytest.raises(estimates.EngineRefusal, match="math domain error"):
        first.result(timeout=60)
    assert pool.request(("bad",), "math:sqrt", (-1,), owner="A") is first
    with pytest.raises(RuntimeError, match="died"):
        pool.request(("dies",), "os:_exit", (3,), owner="A").result(timeout=60)
    assert pool.request(("dies",), "math:factorial", (3,), owner="A").result(timeout=60) == 6


def test_a_request_with_its_own_limit_runs_past_the_pools(pool):
    """A model of one's own is estimated on a click with a longer limit (OWN_MODEL_SECONDS) than a slider's estimate:
    the same sleep that the pool's limit refuses finishes under the request's own, and the pool's still holds."""
    pool.max_seconds = 1.0
    assert pool.request(("own",), "time:sleep", (2.5,), owner="A", max_seconds=30).result(timeout=60) is None
    with pytest.raises(estimates.EstimateTooLong, match=r"more than 1 s to estimate"):
        pool.request(("pools",), "time:sleep", (2.5,), owner="A").result(timeout=60)
    assert estimates.OWN_MODEL_SECONDS > estimates.MAX_SECONDS


def test_an_estimate_process_computes_on_one_thread(pool):
    """Replays compute no numbers; the run worker keeps the cores (its timings are what the lessons read)."""
    assert pool.get(("threads",), "torch:get_num_threads", (), {}) == 1


def test_an_estimate_process_is_named_for_ps_and_top(pool):
    """An operator (and the load test, which kills the run worker only) tells the lab's processes apart by name."""
    import sys

    if not sys.platform.startswith("linux"):
        pytest.skip("process names through prctl are Linux's")
    names = {open(f"/proc/{pid}/comm").read().strip() for pid in pool.pids()}
    assert names == {"gml-estimate"}


def test_two_different_requests_never_share_a_result(pool):
    """The cache's key, from both sides: the device, every field of the configuration (batch, the optimizer's
    implementation) and the workspaces table each give their own replay, checked against the engine called directly."""
    from experiments.estimate.estimator import estimate

    base = pool.estimate(CFG, None, "cpu", None, wait=None)
    cuda = pool.estimate(CFG, None, "cuda", None, wait=None)
    assert cuda["device_type"] == "cuda" and base["device_type"] == "cpu"
    assert cuda["peak_bytes"] == estimate(CFG, device_type="cuda")["peak_bytes"] != base["peak_bytes"]
    for other in (CFG.replace(batch=16), CFG.replace(optimizer_impl="for-loop"), CFG.replace(width=64)):
        got = pool.estimate(other, None, "cpu", None, wait=None)
        assert got["peak_bytes"] == estimate(other, device_type="cpu")["peak_bytes"], other
    assert pool.estimate(CFG.replace(batch=16), None, "cpu", None, wait=None)["peak_bytes"] != base["peak_bytes"]


def test_a_search_reports_its_progress_to_the_page_that_waits(pool):
    """What fits searches lever combinations one by one in an estimate process; the page that waits for it is told
    how many are done of how many planned, in its own thread, as they finish, and then gets the result."""
    cfg = ExperimentConfig.from_dict(
        {"model_source": "preset:gpt2:tiny", "batch": 2, "seq_len": 16, "precision": "bf16", "device": "cuda"}
    )
    seen = []
    res = pool.model_fits(cfg, 2**30, "cuda", wait=None, methods=True, progress=lambda d, p: seen.append((d, p)))
    assert len(res["methods"]) == 8
    assert seen and {p for _, p in seen} == {8} and [d for d, _ in seen] == sorted({d for d, _ in seen})
    assert all(1 <= d <= 8 for d, _ in seen)


def test_in_a_class_one_tabs_expensive_estimates_hold_one_process_not_both(pool):
    """One tab's two expensive estimates (a slider moved twice over a 64-layer model) held both processes, and every
    other learner's estimate waited up to 20 s. In a class a session runs one at a time; its second waits for its
    first, and another session's estimate takes the other process at once."""
    pool.request(("warm B",), "math:factorial", (2,), owner="B").result(timeout=60)  # B is in the class
    first = pool.request(("A1",), "time:sleep", (4,), owner="A")
    second = pool.request(("A2",), "time:sleep", (4,), owner="A")
    time.sleep(0.5)
    t0 = time.monotonic()
    assert pool.request(("B",), "math:factorial", (4,), owner="B").result(timeout=60) == 24
    assert time.monotonic() - t0 < 1.0  # not behind A's second sleep
    assert not second.done() and first.result(timeout=30) is None and second.result(timeout=30) is None


def test_a_learner_alone_uses_both_processes():
    from experiments.jobs.policy import CLASS_WINDOW_S, may_start

    now = 1000.0
    assert may_start("A", set(), {}, now)  # nothing of A's runs
    assert may_start("A", {"A"}, {"A": now - 1}, now)  # alone: a second process for the same tab
    assert not may_start("A", {"A"}, {"A": now - 1, "B": now - 5}, now)  # B was served 5 s ago: a class
    assert may_start("A", {"A"}, {"A": now - 1, "B": now - CLASS_WINDOW_S - 1}, now)  # B left a while ago
    assert may_start(None, {None}, {"B": now}, now)  # the command line's own estimates are not a session's


def test_the_servers_pool_has_as_many_processes_as_the_operator_gives_it(tmp_path, monkeypatch):
    import json

    from experiments.core.limits import ENV, LimitsError, load

    path = tmp_path / "limits.json"
    monkeypatch.setenv(ENV, str(path))
    monkeypatch.delenv("GPU_MEMORY_LAB_INLINE", raising=False)
    monkeypatch.setattr(estimates, "_shared", None)
    path.write_text(json.dumps({"estimate_processes": 3}))
    pool = estimates.shared_pool()
    try:
        assert len(pool._slots) == 3
    finally:
        pool.close()
        monkeypatch.setattr(estimates, "_shared", None)
    for bad in (0, 1.5, True):
        path.write_text(json.dumps({"estimate_processes": bad}))
        with pytest.raises(LimitsError, match="estimate_processes must be a positive whole number"):
            load()
    monkeypatch.delenv(ENV)
    assert load().estimate_processes == 2  # without a file: two
