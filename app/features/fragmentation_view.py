"""The allocator sandbox: one allocation pattern, run with the default caching allocator and with expandable
segments, charted as allocated vs reserved; segments and the out-of-memory message shown as the allocator has them."""

from __future__ import annotations

import streamlit as st

from app import backend
from app.charts import fragmentation, segments
from app.i18n import t
from app.ui import expect_view, jobs, layout, results, widget_state
from app.ui.failures import job_failed
from course import catalog
from course.units import fmt_bytes


def entries(meta: dict) -> dict[str, dict]:
    return {f["id"]: f for f in meta.get("fragmentation") or [] if isinstance(f, dict) and f.get("id")}


def entry_for(result: dict, meta: dict) -> dict | None:
    """The lesson's pattern entry whose parameters produced this result."""
    for entry in entries(meta).values():
        params = {"budget_mb": None, **entry.get("params", {})}  # no budget in the lesson means none in the run
        if all(result.get(k) == v for k, v in params.items()):
            return entry
    return None


def show(result: dict, meta: dict, key: str) -> None:
    results.device_label(result, result.get("started_at"))
    runs = result.get("runs") or {}
    cols = st.columns(len(runs) or 1)
    for col, (allocator, run) in zip(cols, runs.items(), strict=False):
        end = run.get("end") or {}
        # The allocator as the label (short enough for a half-width column), what the number is below it.
        col.metric(
            t("frag.allocator." + allocator), fmt_bytes(end.get("reserved_bytes", 0) - end.get("allocated_bytes", 0))
        )
        col.caption(f"{t('frag.unallocated')} · {t('frag.reserved_end')}: {fmt_bytes(end.get('reserved_bytes'))}")
    st.markdown(f"##### {t('frag.chart')}")
    layout.altair(fragmentation.chart(fragmentation.frame(result)))
    entry = entry_for(result, meta)
    if entry:
        expect_view.notice(meta, "fragmentation", runs, entry=entry)
    for allocator, run in runs.items():
        if run.get("oom"):
            st.error(t("frag.oom", allocator=t("frag.allocator." + allocator)))
            st.code(run["oom"]["message"], language=None, wrap_lines=True)
    if any((run.get("end") or {}).get("segments") for run in runs.values()):
        with layout.lazy_expander(t("frag.segments"), key=f"{key}.segments_open") as open_:
            if open_:
                st.dataframe(fragmentation.segments_table(result), hide_index=True, width="stretch")
                _segment_charts(runs)


def _segment_charts(runs: dict) -> None:
    """Each setting's segments with the blocks inside them (results recorded before blocks were kept have none)."""
    for allocator, run in runs.items():
        segs = [s for s in (run.get("end") or {}).get("segments") or [] if s.get("blocks")]
        if segs:
            st.markdown(f"###### {t('frag.allocator.' + allocator)}")
            layout.altair(segments.figure(segs))


def render(lesson_id: str, meta: dict) -> None:
    known = entries(meta)
    if not known:
        return
    ns = f"{lesson_id}.frag"
    labels = {i: expect_view.text(meta, e.get("label"), i) for i, e in known.items()}
    gpu = backend.gpu_worker()
    with st.container(border=True):
        st.subheader(t("frag.title"))
        st.caption(t("frag.explain"))
        chosen = st.selectbox(
            t("frag.pattern"),
            list(known),
            format_func=labels.__getitem__,
            key=widget_state.labelled(f"{ns}_pattern"),
            persist_state="session",
        )
        if not gpu:
            st.info(t("frag.needs_gpu"))
        params = dict(known[chosen]["params"], device="cuda")
        spec = {"label": labels[chosen], "kind": "fragmentation", "params": params}
        done = jobs.panel(ns, t("frag.run"), [spec], tag=chosen, disabled=not gpu)
        if done:
            status = done["statuses"][0]
            if status.get("state") == "done" and status.get("result"):
                show(status["result"], meta, key=ns)
            else:
                job_failed(status)
        recorded, _ = backend.safe_load_recorded(catalog.fragmentation_id(lesson_id, chosen))
        if recorded:
            name = (recorded.get("device") or {}).get("name", "GPU")
            with st.expander(t("frag.recorded", name=name), icon=":material/history:", expanded=not gpu):
                show(recorded, meta, key=f"{ns}.recorded")
