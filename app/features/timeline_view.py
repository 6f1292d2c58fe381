"""Lesson 2's timeline box: the allocation timeline of the learner's last sandbox run, and of the preset recorded
on a GPU (app/ui/timeline.py draws both)."""

from __future__ import annotations

import streamlit as st

from app import backend
from app.i18n import t
from app.ui import jobs, layout, timeline
from course import catalog


def lesson_section(lesson_id: str) -> None:
    """Lesson 2's box: the timeline of the learner's last sandbox run and of the preset recorded on a GPU."""
    gpu = backend.gpu_worker()
    with st.container(border=True):
        st.subheader(t("timeline.lesson_title"))
        st.caption(t("timeline.lesson_explain"))
        done = jobs.finished(lesson_id)
        result = (done["statuses"][0].get("result") if done and done.get("statuses") else None) or None
        recorded, _ = backend.safe_load_recorded(catalog.preset_id(lesson_id))
        shown = (
            bool(recorded and recorded.get("history")) and catalog.preset_id(lesson_id) == catalog.TIMELINE_RECORDING
        )
        live = bool(result and result.get("history"))
        if live:
            st.markdown(f"##### {t('timeline.lesson_live')}")
            # On a CPU the live run has no segments; the recording below has them: not drawn twice.
            timeline.render(result, key=f"{lesson_id}.timeline", segments_fallback=not shown)
        else:
            st.caption(t("timeline.lesson_none"))
        if recorded and recorded.get("history"):
            name = (recorded.get("device") or {}).get("name", "GPU")
            label = t("timeline.lesson_recorded", name=name)
            # Open on a CPU until the learner's own run is drawn above it, then closed: each timeline is about
            # 2,700 rows (half a megabyte of chart) that the browser took a second or more to draw beside the
            # result. A key per state, so the closing is not undone by the kept state.
            key = f"{lesson_id}.timeline.recorded_open.{'after' if live else 'before'}"
            with layout.lazy_expander(
                label, key=key, icon=":material/history:", expanded=not gpu and not live
            ) as open_:
                if open_:
                    timeline.render(recorded, key=f"{lesson_id}.timeline.recorded")
