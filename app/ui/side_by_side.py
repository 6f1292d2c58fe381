"""Side by side: pin one result (a live run or a recorded GPU run) and show it beside any later one, on one scale.

For a teacher at a projector: "look at the difference". The pin lives in the session, so it follows the
learner from page to page.
"""

from __future__ import annotations

import streamlit as st

from app import backend
from app.backend import net_peak
from app.charts import memory
from app.i18n import t
from app.ui import layout
from course import experiment
from course.units import fmt_bytes

PIN = "side_by_side.pinned"


def _identity(result: dict) -> tuple:
    return result.get("started_at"), str(sorted((result.get("config") or {}).items()))


def _title(result: dict, recorded: bool) -> str:
    device = (result.get("device") or {}).get("name") or (result.get("device") or {}).get("type", "?")
    return t("side.title_recorded" if recorded else "side.title_live", device=device)


def differences(a: dict, b: dict) -> list[tuple[str, object, object]]:
    """(field, pinned value, this value) for every field of the experiment that differs (course/experiment.py)."""
    return experiment.differences(a.get("config"), b.get("config"), backend.DEFAULTS)


def controls(result: dict, key: str, recorded: bool = False) -> None:
    """The pin button under a result, and the side-by-side view when another result is pinned."""
    pinned = st.session_state.get(PIN)
    same = pinned is not None and _identity(pinned["result"]) == _identity(result)
    cols = st.columns(2)
    if cols[0].button(t("side.pin"), key=f"{key}.pin", disabled=same, width="stretch", help=t("side.pin_help")):
        st.session_state[PIN] = {"result": result, "title": _title(result, recorded)}
        st.rerun()
    if pinned is not None and cols[1].button(t("side.unpin"), key=f"{key}.unpin", width="stretch"):
        st.session_state.pop(PIN, None)
        st.rerun()
    if pinned is not None and not same:
        show(pinned["result"], pinned["title"], result, _title(result, recorded), key)


def show(left: dict, left_title: str, right: dict, right_title: str, key: str) -> None:
    diff = differences(left, right)
    frames_ = [memory.frame(r) for r in (left, right)]
    longs = [memory.long(df, df["reserved_mib"].notna().any()) if not df.empty else df for df in frames_]
    top = max((float(d["mib"].max()) for d in longs if not d.empty), default=0.0)
    # Metrics in two columns; the charts one above the other, on one scale: in the half-width result column of
    # a projector, two charts side by side would each be too narrow to read.
    st.markdown(f"##### {t('side.heading')}")
    cols = st.columns(2)
    for col, result, title in zip(cols, (left, right), (t("side.pinned"), t("side.this")), strict=True):
        col.metric(title, fmt_bytes(net_peak(result)), help=t("side.net_peak"))
    for result, title, df in zip((left, right), (left_title, right_title), longs, strict=True):
        st.markdown(f"**{title}** · {fmt_bytes(net_peak(result))}")
        if not df.empty:
            layout.altair(memory.chart(df, y_max=top * 1.05))
    a, b = net_peak(left), net_peak(right)
    if a and b:
        st.caption(t("side.ratio", ratio=f"{b / a:.2f}"))
    if diff:
        st.markdown(
            t("side.differs") + " " + "; ".join(f"{t('field.' + k, default=k)}: {va} → {vb}" for k, va, vb in diff)
        )
    else:
        st.caption(t("side.same_config"))
