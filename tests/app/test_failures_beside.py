"""A run refused for memory beside the device's allocator (a paged optimizer's managed memory, offloaded activations'
pinned host memory) is said in the learner's language with its figures, and without the hint to force the run, which
does not lift it (experiments/measure/fits.py beside_the_allocator)."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest


def _page():
    import streamlit as st

    from app.ui import failures

    info = {
        "type": "WouldNotFit",
        "code": st.session_state["code"],
        "params": {"peak_bytes": 46 << 30, "available_bytes": 43 << 30},
    }
    failures.job_failed({"state": "error", "error": "WouldNotFit: refused", "error_info": info}, "Run")


@pytest.mark.parametrize(
    "code, lang, words",
    [
        ("paged_memory", "en", ["46.00 GiB", "43.00 GiB", "paged", "forcing the run does not lift"]),
        ("paged_memory", "zh", ["46.00 GiB", "43.00 GiB", "分页优化器", "强制运行"]),
        ("pinned_memory", "en", ["46.00 GiB", "pinned host memory"]),
        ("pinned_memory", "zh", ["46.00 GiB", "锁页主机内存"]),
    ],
)
def test_memory_beside_the_allocator_is_said_with_its_figures_and_no_force_hint(code, lang, words):
    at = AppTest.from_function(_page, default_timeout=30)
    at.session_state["code"], at.session_state["lang"] = code, lang
    at.run()
    assert not at.exception
    (said,) = [w.value for w in at.warning]
    assert said.startswith("Run: ") and all(w in said for w in words), said
    assert not at.info and not at.error  # neither the engine's English text nor "turn on force"


def _died():
    import streamlit as st

    from app.ui import failures
    from experiments.jobs import errors

    status = {"state": "error", "error": "the worker process died ...", "error_info": errors.worker_died()}
    failures.job_failed(status | {"retried": st.session_state["retried"]}, st.session_state["label"])


@pytest.mark.parametrize(
    "lang, label, retried, words",
    [
        ("en", "Run", True, ["died twice", "server log"]),
        ("zh", "运行", True, ["死了两次", "服务器日志"]),
        ("en", "Run", False, ["not run again", "server log"]),
        ("zh", "运行", False, ["没有被重新运行", "服务器日志"]),
    ],
)
def test_a_job_whose_worker_died_is_said_in_the_pages_language(lang, label, retried, words):
    at = AppTest.from_function(_died, default_timeout=30)
    at.session_state["lang"], at.session_state["label"], at.session_state["retried"] = lang, label, retried
    at.run()
    assert not at.exception
    (said,) = [e.value for e in at.error]
    assert said.startswith(("The experiment failed: Run: ", "实验失败：运行: ")) and all(w in said for w in words), said
    assert "..." not in said  # the engine's English sentence, in either language
