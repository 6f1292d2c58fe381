"""A run whose worker died runs again (experiments/jobs/lanes.py): while it does, its progress says so in the page's
language, and a run that was never retried says nothing of it."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest


def _page():
    import time

    import streamlit as st

    from app.ui import jobs

    group = {"specs": [{"label": "Run", "kind": "run", "params": {}}], "since": time.time()}
    status = {"state": "running", "progress": {"done": 1, "total": 6, "label": "x"}, "retried": st.session_state["r"]}
    jobs._render_progress("t", group, [status])


@pytest.mark.parametrize("lang, words", [("en", "runs it again from the start"), ("zh", "从头重新运行")])
def test_a_retried_run_says_it_runs_again(lang, words):
    for retried in (True, False):
        at = AppTest.from_function(_page, default_timeout=30)
        at.session_state["lang"], at.session_state["r"] = lang, retried
        at.run()
        assert not at.exception
        said = " ".join(c.value for c in at.caption)
        assert (words in said) == retried, said
