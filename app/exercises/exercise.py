"""An exercise page: the task, hints and reference answer behind expanders; on the right, the graded exercise
(predict or choose, run for real, get graded) and the free sandbox to explore further."""

from __future__ import annotations

import streamlit as st

from app.features import leak_sandbox, recorded_view, rounds_view
from app.i18n import t
from app.ui import layout, sandbox


def render(lesson_id: str, graded, leaks: bool = False) -> None:
    """`graded(meta)` draws the exercise's graded panel (app/exercises/grading_panel*.py)."""
    meta, left, right = layout.lesson_page(lesson_id)
    with left:
        with st.expander(t("exercise.hints"), icon=":material/lightbulb:"):
            layout.markdown_file(lesson_id, "hints")
        with st.expander(t("exercise.answer"), icon=":material/task_alt:"):
            st.caption(t("exercise.answer_note"))
            layout.markdown_file(lesson_id, "answer")
    with right:
        graded_tab, free_tab = st.tabs([t("exercise.tab.graded"), t("exercise.tab.free")])
        with graded_tab:
            graded(meta)
        with free_tab:
            if leaks:
                leak_sandbox.render(lesson_id, meta)
                st.subheader(t("leak.baseline"))
                st.caption(t("leak.baseline_explain"))
            sandbox.render(lesson_id, meta)
            # The time ratios the answer quotes, paired by round: recorded, and runnable here.
            rounds_view.set_boxes(lesson_id, meta)
            recorded_view.browser(lesson_id)
