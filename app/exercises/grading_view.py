"""Streamlit pieces the graded exercises share: the progress indicator (session and URL) and grade sentences."""

from __future__ import annotations

import streamlit as st

from app.i18n import STRINGS, t
from app.ui import urlstate
from course.grading.common import parse_progress, progress_key

# Arguments that are ids: worded in the learner's language when the sentence is shown.
_ID_ARGS = {
    "phase": "phase.",
    "category": "cat.",
    "field": "ex1.field.",
    "first": "ex3.fix.",
    "second": "ex3.fix.",
    "fix": "ex3.fix.",
    "optimizer": "opt.optimizer.",
}


def say(msg: dict) -> str:
    args = {k: t(_ID_ARGS[k] + str(v), default=str(v)) if k in _ID_ARGS else v for k, v in msg["args"].items()}
    key = msg["key"] if msg["key"] in STRINGS or not msg.get("fallback") else msg["fallback"]
    return t(key, **args)


def say_all(messages: list[dict]) -> str:
    return "\n".join(f"- {say(m)}" for m in messages)


def progress(lesson_id: str, total: int) -> int:
    """How many of the exercise's `total` checks the learner's best attempt passed (from the session or a link)."""
    key = progress_key(lesson_id)
    urlstate.init(key, 0, lambda raw: parse_progress(raw, total))
    return st.session_state[key]


def record(lesson_id: str, passed: int, total: int) -> None:
    """Keeps the best attempt: a worse retry does not take progress away."""
    key = progress_key(lesson_id)
    st.session_state[key] = max(progress(lesson_id, total), min(passed, total))


def show_progress(lesson_id: str, slot, total: int) -> None:
    """Drawn last into a slot at the top of the panel, so a grade given in this run already counts."""
    done = progress(lesson_id, total)
    label = t("grade.solved") if done == total else t(f"grade.progress.{lesson_id}", done=done, total=total)
    slot.progress(done / total, text=label)
    urlstate.sync(progress_key(lesson_id), done, 0)


def check_line(ok: bool, text: str) -> None:
    (st.success if ok else st.error)(text, icon=":material/check_circle:" if ok else ":material/cancel:")
