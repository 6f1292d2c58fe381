"""The allocation timeline of a run (experiments/measure/history.py) and the allocator's segments, drawn offline with
Altair: live bytes after every allocation and free, stacked by category, phase starts as rules; the reserved
segments with the blocks inside them; and the raw snapshot for pytorch.org/memory_viz."""

from __future__ import annotations

import gzip
from pathlib import Path

import altair as alt
import pandas as pd
import streamlit as st

from app import backend
from app.charts.charts import BASELINE_COLOR, CATEGORY_COLORS, FREE_COLOR, HEIGHT
from app.charts.frames import phase_name
from app.i18n import t
from course.units import MIB, fmt_bytes

ROOT = Path(__file__).resolve().parents[2]
RECORDED_DIR = ROOT / "recorded" / "h200"
# The recorded run whose timeline and segments a learner without a GPU is shown.
RECORDED_ID = "analysis-preset"
ORDER = ("baseline", *CATEGORY_COLORS)


def _cat_label(cat: str) -> str:
    return t("timeline.cat.baseline") if cat == "baseline" else t("cat." + cat, default=cat)


def _phase_label(p: dict | None) -> str:
    if not p:
        return "—"
    label = phase_name(p["phase"])
    return f"{p['step']}·{label}" if p.get("step") else label


def timeline_frame(history: dict) -> pd.DataFrame:
    """Long form: one row per event and category with live MiB; the event's size, frame and phase for tooltips."""
    from experiments.measure.history import series

    phases = {p["index"]: p for p in history.get("phases") or []}
    events = {e["seq"]: e for e in history.get("events") or []}
    rows = []
    for row in series(history):
        e = events.get(row["seq"], {})
        for cat in ORDER:
            value = row.get(cat, 0)
            if not value and not (cat == "baseline" and history.get("start_bytes")):
                continue
            rows.append({"seq": row["seq"], "category": _cat_label(cat), "mib": value / MIB,
                         "total_mib": row["total"] / MIB, "event": fmt_bytes(e.get("bytes")),
                         "frame": e.get("frame") or "—", "phase": _phase_label(phases.get(row["phase"])),
                         "n": e.get("n", 1)})
    return pd.DataFrame(rows, columns=["seq", "category", "mib", "total_mib", "event", "frame", "phase", "n"])


def phase_rules(history: dict) -> pd.DataFrame:
    rows = [{"seq": p["seq"], "phase": _phase_label(p)} for p in history.get("phases") or [] if p.get("seq") is not None]
    return pd.DataFrame(rows, columns=["seq", "phase"])


def _color(used: list[str]) -> alt.Color:
    domain = [_cat_label(c) for c in ORDER]
    colors = [BASELINE_COLOR, *CATEGORY_COLORS.values()]
    return alt.Color("category:N", title=t("axis.category"), scale=alt.Scale(domain=domain, range=colors),
                     # One column below the chart: two are cut off in a half-width column.
                     legend=alt.Legend(orient="bottom", columns=1, labelLimit=320, values=used))


def timeline_chart(df: pd.DataFrame, rules: pd.DataFrame) -> alt.LayerChart:
    """Stacked areas (a step after every event) in the app's category colours; grey rules at phase starts."""
    used = list(dict.fromkeys(df["category"]))
    order = {c: i for i, c in enumerate(_cat_label(c) for c in ORDER)}
    df = df.assign(order=df["category"].map(order))
    tooltip = [alt.Tooltip("seq:Q", title=t("timeline.axis.event")),
               alt.Tooltip("phase:N", title=t("axis.phase")),
               alt.Tooltip("event:N", title=t("timeline.tip.event")),
               alt.Tooltip("frame:N", title=t("timeline.tip.frame")),
               alt.Tooltip("category:N", title=t("axis.category")),
               alt.Tooltip("mib:Q", title=t("axis.mib"), format=",.2f"),
               alt.Tooltip("total_mib:Q", title=t("timeline.tip.total"), format=",.2f")]
    area = alt.Chart(df).mark_area(interpolate="step-after").encode(
        x=alt.X("seq:Q", title=t("timeline.axis.event")),
        y=alt.Y("mib:Q", title=t("axis.mib"), stack="zero"),
        color=_color(used), order=alt.Order("order:Q"), tooltip=tooltip)
    layers = [area]
    if not rules.empty:
        layers.append(alt.Chart(rules).mark_rule(color="#888", strokeDash=[3, 3], strokeWidth=1).encode(
            x="seq:Q", tooltip=[alt.Tooltip("phase:N", title=t("axis.phase"))]))
    # Streamlit fits the legend into the chart's height: one row per category.
    return alt.layer(*layers).properties(height=HEIGHT + 60 + 22 * len(used))


def segments_frame(segments: list[dict]) -> pd.DataFrame:
    rows = []
    for n, seg in enumerate(segments):
        label = t("timeline.segment", n=n + 1, size=fmt_bytes(seg.get("total_bytes")))
        for b in seg.get("blocks") or []:
            free = b.get("state") != "allocated"
            cat = "free" if free else (b.get("category") or "allocated")
            rows.append({"segment": label, "start": b["offset"] / MIB, "end": (b["offset"] + b["size"]) / MIB,
                         "size": fmt_bytes(b["size"]),
                         "category": t("timeline.free") if free else (
                             t("timeline.allocated") if cat == "allocated" else _cat_label(cat)),
                         "frame": b.get("frame") or "—"})
    return pd.DataFrame(rows, columns=["segment", "start", "end", "size", "category", "frame"])


def segment_chart(df: pd.DataFrame) -> alt.Chart:
    """One bar per reserved segment; its blocks side by side, free ones grey: reserved but unallocated."""
    domain = [t("timeline.free"), t("timeline.allocated")] + [_cat_label(c) for c in CATEGORY_COLORS]
    colors = [FREE_COLOR, CATEGORY_COLORS["parameters"]] + list(CATEGORY_COLORS.values())
    used = list(dict.fromkeys(df["category"]))
    return alt.Chart(df).mark_bar(stroke="white", strokeWidth=0.5).encode(
        y=alt.Y("segment:N", sort=list(dict.fromkeys(df["segment"])), title=None, axis=alt.Axis(labelLimit=200)),
        x=alt.X("start:Q", title=t("timeline.axis.offset")), x2="end:Q",
        color=alt.Color("category:N", title=None, scale=alt.Scale(domain=domain, range=colors),
                        legend=alt.Legend(orient="bottom", columns=1, labelLimit=320, values=used)),
        tooltip=[alt.Tooltip("segment:N", title=t("timeline.tip.segment")),
                 alt.Tooltip("category:N", title=t("axis.category")),
                 alt.Tooltip("size:N", title=t("timeline.tip.size")),
                 alt.Tooltip("frame:N", title=t("timeline.tip.frame"))],
    ).properties(height=60 + 26 * df["segment"].nunique() + 22 * len(used))


def snapshot_bytes(history: dict) -> bytes | None:
    """The raw snapshot pickle: a live run's file in the worker's temp folder, or a recording's gzip."""
    snap = history.get("snapshot") or {}
    try:
        if snap.get("recorded"):
            return gzip.decompress((RECORDED_DIR / Path(snap["recorded"]).name).read_bytes())
        if snap.get("path"):
            return Path(snap["path"]).read_bytes()
    except OSError:
        return None
    return None


def _download(history: dict, cuda: bool, key: str) -> None:
    if not cuda:
        st.caption(t("timeline.no_snapshot_cpu"))
        return
    data = snapshot_bytes(history)
    if data is None:
        st.caption(t("timeline.snapshot_gone"))
        return
    st.download_button(t("timeline.download"), data, file_name="snapshot.pickle", mime="application/octet-stream",
                       key=f"{key}.snapshot", icon=":material/download:")
    st.caption(t("timeline.download_hint"))


def render_segments(history: dict | None, cuda: bool, key: str) -> None:
    st.markdown(f"###### {t('timeline.segments_title')}")
    if not cuda:
        st.info(t("timeline.segments_cpu"))
        recorded, _ = backend.safe_load_recorded(RECORDED_ID)
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
    st.altair_chart(segment_chart(segments_frame(segs)), width="stretch")


def render(result: dict, key: str) -> None:
    """The timeline of one result (live or recorded), its segments and the snapshot download."""
    history = result.get("history")
    cuda = (result.get("device") or {}).get("type") == "cuda"
    if not history:
        st.caption(t("timeline.missing"))
        if not cuda:
            render_segments(None, cuda, key)
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
    for note in notes:
        st.caption(note)
    df = timeline_frame(history)
    if df.empty:
        st.caption(t("timeline.empty"))
    else:
        st.altair_chart(timeline_chart(df, phase_rules(history)), width="stretch")
        st.caption(t("timeline.peak", peak=fmt_bytes(history.get("peak_bytes")),
                     final=fmt_bytes(history.get("final_bytes")), start=fmt_bytes(history.get("start_bytes"))))
    render_segments(history, cuda, key)
    _download(history, cuda, key)


def expander(result: dict, key: str, expanded: bool = False) -> None:
    with st.expander(t("timeline.title"), icon=":material/timeline:", expanded=expanded):
        render(result, key)


def lesson_section(lesson_id: str) -> None:
    """Lesson 2's box: the timeline of the learner's last sandbox run and of the preset recorded on a GPU."""
    from app.ui import jobs

    info, _ = backend.safe_device_info()
    gpu = bool(info) and info.get("type") == "cuda"
    with st.container(border=True):
        st.subheader(t("timeline.lesson_title"))
        st.caption(t("timeline.lesson_explain"))
        done = jobs.finished(lesson_id)
        result = (done["statuses"][0].get("result") if done and done.get("statuses") else None) or None
        if result and result.get("history"):
            st.markdown(f"##### {t('timeline.lesson_live')}")
            render(result, key=f"{lesson_id}.timeline")
        else:
            st.caption(t("timeline.lesson_none"))
        recorded, _ = backend.safe_load_recorded(f"{lesson_id}-preset")
        if recorded and recorded.get("history"):
            name = (recorded.get("device") or {}).get("name", "GPU")
            with st.expander(t("timeline.lesson_recorded", name=name), icon=":material/history:", expanded=not gpu):
                render(recorded, key=f"{lesson_id}.timeline.recorded")
