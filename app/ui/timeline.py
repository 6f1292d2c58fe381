"""A run's allocation timeline, its allocator segments and its raw snapshot for pytorch.org/memory_viz, drawn
offline with Altair (app/charts/timeline.py, app/charts/segments.py) under every result."""

from __future__ import annotations

import gzip
from pathlib import Path

import streamlit as st

from app import backend
from app.charts import segments, timeline
from app.i18n import t
from app.ui import layout
from course import catalog
from course.units import fmt_bytes


def snapshot_bytes(history: dict) -> bytes | None:
    """The raw snapshot pickle: a live run's file in the worker's temp folder, or a recording's gzip."""
    snap = history.get("snapshot") or {}
    try:
        if snap.get("recorded"):
            packed = backend.recorded_file(Path(snap["recorded"]).name)
            return gzip.decompress(packed) if packed is not None else None
        return Path(snap["path"]).read_bytes() if snap.get("path") else None
    except OSError:
        return None


def _download(history: dict, cuda: bool, key: str) -> None:
    if not cuda:
        st.caption(t("timeline.no_snapshot_cpu"))
        return
    data = snapshot_bytes(history)
    if data is None:
        st.caption(t("timeline.snapshot_gone"))
        return
    st.download_button(
        t("timeline.download"),
        data,
        file_name="snapshot.pickle",
        mime="application/octet-stream",
        key=f"{key}.snapshot",
        icon=":material/download:",
    )
    st.caption(t("timeline.download_hint"))


def render_segments(history: dict | None, cuda: bool, key: str, fallback: bool = True) -> None:
    """`fallback`: on a CPU, draw the recorded GPU run's segments (unless the page shows that recording already)."""
    st.markdown(f"###### {t('timeline.segments_title')}")
    if not cuda and not fallback:
        st.info(t("timeline.segments_cpu_below"))
        return
    if not cuda:
        st.info(t("timeline.segments_cpu"))
        recorded, _ = backend.safe_load_recorded(catalog.TIMELINE_RECORDING)
        segs = ((recorded or {}).get("history") or {}).get("segments")
        if not segs:
            st.caption(t("timeline.segments_no_recording"))
            return
        name = ((recorded or {}).get("device") or {}).get("name", "GPU")
        st.caption(t("timeline.segments_recorded", name=name))
        history = recorded["history"]
    segs = (history or {}).get("segments") or []
    if not segs:
        st.caption(t("timeline.segments_none"))
        return
    reserved = sum(s["total_bytes"] for s in segs)
    free = sum(b["size"] for s in segs for b in s["blocks"] if b["state"] != "allocated")
    at = t("timeline.at_peak") if history.get("segments_at") == "peak" else t("timeline.at_end")
    st.caption(t("timeline.segments_summary", at=at, n=len(segs), reserved=fmt_bytes(reserved), free=fmt_bytes(free)))
    layout.altair(segments.figure(segs))


def render(result: dict, key: str, segments_fallback: bool = True) -> None:
    """The timeline of one result (live or recorded), its segments and the snapshot download."""
    history = result.get("history")
    cuda = (result.get("device") or {}).get("type") == "cuda"
    if not history:
        st.caption(t("timeline.missing"))
        if not cuda:
            render_segments(None, cuda, key, segments_fallback)
        return
    if history.get("error"):
        st.warning(t("timeline.failed", message=history["error"]))
        return
    st.caption(t("timeline.source_cuda") if history.get("source") == "cuda_snapshot" else t("timeline.source_cpu"))
    notes = []
    if history.get("coalesced"):
        notes.append(t("timeline.coalesced", raw=history.get("raw_events"), shown=len(history.get("events") or [])))
    if history.get("truncated"):
        notes.append(t("timeline.truncated"))
    peak, final, start = (fmt_bytes(history.get(k)) for k in ("peak_bytes", "final_bytes", "start_bytes"))
    under = t("timeline.peak", peak=peak, final=final, start=start)  # worded with the notes, drawn under the chart
    for note in notes:
        st.caption(note)
    figure = timeline.figure(history, backend.history_series(history))
    if figure is None:
        st.caption(t("timeline.empty"))
    else:
        layout.altair(figure)
        st.caption(under)
    render_segments(history, cuda, key, segments_fallback)
    _download(history, cuda, key)


def expander(result: dict, key: str, expanded: bool = False) -> None:
    with layout.lazy_expander(
        t("timeline.title"), key=f"{key}.timeline_open", icon=":material/timeline:", expanded=expanded
    ) as open_:
        if open_:
            render(result, key)
