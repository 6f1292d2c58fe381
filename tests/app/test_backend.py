"""app/backend.py, the app's one door to the engine: a job's failure read from its structured error (or, from an
engine that has none, from its message), configurations validated once, and one estimate cache that computes each
key once, keeps no failure and never raises into a page."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

from app import backend, job_errors
from app.memo import Memo
from experiments.core import config as engine_config
from experiments.core.config import ExperimentConfig
from experiments.estimate.estimator import estimate as engine_estimate
from tests.app.pages import open_page, run_until, small_config

ROOT = Path(__file__).resolve().parents[2]


def test_a_failure_is_read_from_its_error_info_first():
    info = {"type": "WouldNotFit", "code": "max_peak_gib", "params": {"limit_gib": 40}}
    got = job_errors.failure({"state": "error", "error": "anything at all", "error_info": info})
    assert (got.type, got.code, got.params, got.message) == (
        "WouldNotFit",
        "max_peak_gib",
        {"limit_gib": 40},
        "anything at all",
    )


@pytest.mark.parametrize(
    ("message", "kind", "code"),
    [
        (
            "WouldNotFit: estimated peak 81.00 GiB is above this server's limit of 40 GiB per run (max_peak_gib)",
            "WouldNotFit",
            "max_peak_gib",
        ),
        ("WouldNotFit: estimated peak 3.00 GiB, 1.00 GiB available", "WouldNotFit", None),
        ("ConfigError: batch: batch 30 must be divisible by accum 4", "ConfigError", None),
        ("the worker process died (see the server log); it was restarted", "Internal", None),
    ],
)
def test_without_error_info_a_failure_is_read_from_its_message(message, kind, code):
    got = job_errors.failure({"state": "error", "error": message})
    assert (got.type, got.code) == (kind, code)


def test_only_an_error_is_a_failure():
    assert job_errors.failure({"state": "done", "result": {}}) is None
    assert job_errors.failure({"state": "cancelled", "error": None}) is None


def test_a_configuration_is_validated_once_however_often_it_is_asked(monkeypatch):
    calls = []
    real = engine_config.validate
    monkeypatch.setattr(engine_config, "validate", lambda cfg, single=None: (calls.append(1), real(cfg, single))[1])
    data = {"layers": 3, "width": 72, "batch": 6, "seed": 987654}  # a configuration no other test asks for
    first = [backend.config(dict(data)) for _ in range(5)]
    assert len(calls) == 1 and all(cfg is first[0][0] and err is None for cfg, err in first)
    cfg, err = backend.config(dict(data, batch=7, accum=2))
    assert cfg is None and err.code == "batch_accum" and err.field == "batch"
    assert backend.config(dict(data, width=[1, 2]))[1] is not None  # unhashable: validated, refused, not cached


def test_the_memo_computes_a_key_once_for_concurrent_callers_and_keeps_no_failure():
    memo, started, calls = Memo(2), threading.Event(), []

    def slow():
        calls.append(1)
        started.set()
        time.sleep(0.2)
        return {"value": 1}

    results = []
    threads = [threading.Thread(target=lambda: results.append(memo.get("k", slow))) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(calls) == 1 and len(results) == 4 and all(r is results[0] for r in results)

    def fails():
        calls.append(1)
        raise ValueError("no")

    for _ in range(2):
        with pytest.raises(ValueError):
            memo.get("bad", fails)
    assert len(calls) == 3  # a failure is computed again, not served from the cache
    memo.get("a", dict), memo.get("b", dict)
    assert "k" not in memo._items and len(memo._items) == 2  # bounded: the oldest key went first
    assert memo.get(("c", [1]), lambda: 7) == 7 and len(memo._items) == 2  # an unhashable key: computed, not kept


def test_the_estimate_is_the_engines_and_a_failure_is_a_message():
    cfg = ExperimentConfig(layers=2, width=96, batch=5, device="cpu")
    est, err = backend.estimate(cfg, for_device="cpu")
    assert err is None and est["peak_bytes"] == engine_estimate(cfg, device_type="cpu")["peak_bytes"]
    assert backend.estimate(cfg, for_device="cpu", wait=0)[0] == est  # the one cache: ready at once
    est, err = backend.estimate(object())
    assert est is None and err.startswith("AttributeError: ")


def test_one_run_click_validates_each_configuration_at_most_once(monkeypatch):
    """A Run click and the runs that show its result: each configuration the page shows is validated once (it was
    about fifteen validations of the same few configurations per click)."""
    counts: dict[tuple, int] = {}
    real = engine_config.validate

    def asked_by_the_app() -> bool:
        """The first caller outside the configuration module is the app's (not the engine's own checks)."""
        frame = sys._getframe(2)
        while frame and frame.f_code.co_filename in (engine_config.__file__, "<string>"):  # and dataclass code
            frame = frame.f_back
        return bool(frame) and Path(frame.f_code.co_filename).resolve().is_relative_to(ROOT / "app")

    def counted(cfg, single=None):
        if single is None and asked_by_the_app():
            key = tuple(sorted(vars(cfg).items()))
            counts[key] = counts.get(key, 0) + 1
        return real(cfg, single)

    ns = "monitoring"
    monkeypatch.setattr(engine_config, "validate", counted)
    at = open_page(ns, state=small_config(ns) | {f"{ns}_seed": 4242})  # configurations no other test validated
    at.button(key=f"{ns}.run").click().run()
    run_until(at, lambda a: f"{ns}.done" in a.session_state)
    at.run()
    assert not at.exception
    twice = {k: n for k, n in counts.items() if n > 1}
    assert counts and not twice, (len(counts), twice)


def test_the_first_page_starts_the_estimate_processes():
    """A graded tab on a fresh server must not wait for the estimate processes to import torch: they start with the
    first page the server draws (after drawing it)."""
    from experiments.jobs import estimates

    estimates._shared = None
    at = open_page("home", "en")
    assert not at.exception and estimates._shared is not None
