"""Streamlit pieces the graded exercises share: the progress indicator (session and URL) and grade sentences."""

from __future__ import annotations

import streamlit as st

from app.i18n import t
from app.ui import urlstate
from course.grading.common import PROGRESS_TOTAL, parse_progress, progress_key

# Arguments that are ids: worded in the learner's language when the sentence is shown.
_ID_ARGS = {"phase": "phase.", "category": "cat.", "field": "ex1.field.", "first": "ex3.fix.", "second": "ex3.fix.",
            "fix": "ex3.fix.", "optimizer": "opt.optimizer."}


def say(msg: dict) -> str:
    args = {k: t(_ID_ARGS[k] + str(v), default=str(v)) if k in _ID_ARGS else v for k, v in msg["args"].items()}
    return t(msg["key"], **args)


def say_all(messages: list[dict]) -> str:
    return "\n".join(f"- {say(m)}" for m in messages)


def progress(lesson_id: str) -> int:
    key = progress_key(lesson_id)
    urlstate.init(key, 0, lambda raw: parse_progress(lesson_id, raw))
    return st.session_state[key]


def record(lesson_id: str, passed: int) -> None:
    """Keeps the best attempt: a worse retry does not take progress away."""
    key = progress_key(lesson_id)
    st.session_state[key] = max(progress(lesson_id), min(passed, PROGRESS_TOTAL[lesson_id]))


def show_progress(lesson_id: str, slot) -> None:
    """Drawn last into a slot at the top of the panel, so a grade given in this run already counts."""
    done, total = progress(lesson_id), PROGRESS_TOTAL[lesson_id]
    label = t("grade.solved") if done == total else t(f"grade.progress.{lesson_id}", done=done, total=total)
    slot.progress(done / total, text=label)
    urlstate.sync(progress_key(lesson_id), done, 0)


def check_line(ok: bool, text: str) -> None:
    (st.success if ok else st.error)(text, icon=":material/check_circle:" if ok else ":material/cancel:")
