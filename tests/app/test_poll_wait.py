"""The page's poll (app/ui/jobs.py): run on its own (the fragment's timer), it waits part of its interval for the
group to end, so a result is drawn when the worker reports it; run within a page run, it never holds the page."""

from __future__ import annotations

import sys

import pytest
from streamlit.testing.v1 import AppTest

from app import backend


@pytest.fixture(autouse=True)
def _main_module_kept(monkeypatch):
    """AppTest runs a function's script as __main__ and leaves it there, a temporary file it then deletes; a worker
    process spawned later in this test process re-imports __main__ and would die at its start."""
    monkeypatch.setitem(sys.modules, "__main__", sys.modules["__main__"])


def _script():
    import streamlit as st

    from app.ui import jobs

    if st.session_state.get("step") == "fragment":
        jobs._poll_body("t")  # what the fragment's timer runs, without the page around it
    else:
        if not jobs.pending("t"):
            jobs.start("t", [{"label": "x", "kind": "run", "params": {}}])
        jobs.poll("t")


def test_the_poll_waits_in_its_own_runs_and_never_in_a_page_run(monkeypatch):
    waits = []
    monkeypatch.setattr(backend, "submit", lambda specs: (["j1"], None))
    monkeypatch.setattr(backend, "status", lambda job_id, result=True: {"state": "running", "position": 0})
    monkeypatch.setattr(backend, "wait_ended", lambda ids, timeout: waits.append((tuple(ids), timeout)) or False)
    at = AppTest.from_function(_script, default_timeout=30)
    at.run()  # the page run that submits
    at.run()  # a page run while the group is pending (a learner moved a slider)
    assert waits == []
    at.session_state["step"] = "fragment"
    at.run()
    assert waits == [(("j1",), 0.5)]
    assert not at.exception


def _submitting_page():
    import streamlit as st

    from app.ui import jobs

    if not jobs.pending("t") and not jobs.finished("t"):
        jobs.start("t", [{"label": "x", "kind": "run", "params": {}}])
    jobs.poll("t")
    if jobs.finished("t"):
        st.markdown("result: " + jobs.finished("t")["statuses"][0]["state"])
    jobs.settle()  # what app/main.py does after the page


def test_a_job_that_ends_while_the_submitting_page_settles_is_drawn_without_waiting_for_a_poll(monkeypatch):
    state, waits = {"j1": "running"}, []

    def wait_ended(ids, timeout):
        waits.append(timeout)
        state["j1"] = "done"  # the worker reports within the wait
        return True

    monkeypatch.setattr(backend, "submit", lambda specs: (["j1"], None))
    monkeypatch.setattr(backend, "status", lambda job_id, result=True: {"state": state[job_id], "position": 0})
    monkeypatch.setattr(backend, "wait_ended", wait_ended)
    at = AppTest.from_function(_submitting_page, default_timeout=30)
    at.run()  # one click: the page, the wait at its end, the page again with the result
    assert waits == [0.5]
    assert [m.value for m in at.markdown] == ["result: done"]
    assert not at.exception
