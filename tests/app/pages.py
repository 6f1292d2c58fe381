"""The page tests' shared helpers: open a page in AppTest, the small sandbox configuration, re-run until a job is done,
open lazy expanders. (tests/app/conftest.py sets the inline worker up before any of them runs.)"""

from __future__ import annotations

import time

import pytest
from streamlit.testing.v1 import AppTest

from course import catalog

MAIN = "../../app/main.py"  # AppTest resolves it from this file's folder
PAGES = catalog.PAGE_IDS
# Small enough that a CPU run takes well under a second.
SMALL = {"model": "mlp", "layers": 2, "width": 64, "batch": 8, "accum": 1, "steps": 2, "timing_steps": 2}


def open_page(page: str, lang: str = "en", state: dict | None = None, query: dict | None = None) -> AppTest:
    at = AppTest.from_file(MAIN, default_timeout=60)
    if lang:
        at.session_state["lang"] = lang
    for key, value in (state or {}).items():
        at.session_state[key] = value
    for key, value in (query or {}).items():
        at.query_params[key] = value
    if page != catalog.HOME:
        at.switch_page(f"views/{page}.py")
    at.run()
    return at


def small_config(ns: str) -> dict:
    return {f"{ns}_{field}": value for field, value in SMALL.items()}


def run_until(at: AppTest, done, timeout: float = 120.0) -> AppTest:
    """Re-run the script (as the polling fragment would) until done(at) or the timeout."""
    deadline = time.time() + timeout
    while not done(at):
        if time.time() > deadline:
            pytest.fail("the job did not finish in time")
        time.sleep(0.3)
        at.run()
    return at


def open_expanders(at: AppTest, suffix: str) -> AppTest:
    """Opens, as a click would, every lazy expander (app/ui/layout.lazy_expander) whose key ends with `suffix`: a
    closed one computes nothing."""
    keys = [k for k in at.session_state._state._state._key_id_mapper._key_id_mapping if k.endswith(suffix)]
    assert keys, f"no expander keyed *{suffix} on the page"
    for k in keys:
        at.session_state[k] = True
    return at.run()
