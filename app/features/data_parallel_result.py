"""A data-parallel run's result, rank by rank (live or recorded), and the lesson's strategies side by side from
their recordings: two GPUs when the project ships them, else the CPU (gloo) ones."""

from __future__ import annotations

import streamlit as st

from app import backend
from app.charts import categories, ranks, step_time
from app.i18n import lang, t
from app.ui import layout, widget_state
from course import content, recordings
from course.units import fmt_bytes


def _net(rank: dict) -> int | None:
    return None if rank.get("peak_bytes") is None else rank["peak_bytes"] - (rank.get("baseline_bytes") or 0)


def show_result(result: dict, meta: dict, key: str, runs: dict | None = None) -> None:
    """`runs`: the results the lesson's prompts are checked against, where they go under the per-rank charts (the
    live run; the recorded comparison puts its prompts under the strategies' charts instead)."""
    device = result.get("device") or {}
    name = device.get("name") if device.get("type") == "cuda" else "CPU"
    st.caption(
        t(
            "multigpu.device",
            device=name,
            n=result.get("world_size"),
            backend=result.get("backend"),
            torch=device.get("torch_version", "?"),
        )
    )
    if device.get("type") != "cuda":
        st.info(t("multigpu.cpu_note"))
    if result.get("errors"):
        st.error(t("multigpu.errors", errors="; ".join(result["errors"])))
    est = (result.get("estimate") or {}).get("peak_bytes")
    all_ranks = result.get("ranks") or []
    cols = st.columns(min(len(all_ranks), 4) or 1)
    for col, rank in zip(cols, all_ranks, strict=False):
        col.metric(t("multigpu.peak", rank=rank["rank"]), fmt_bytes(_net(rank)))
        if categories.rank_breakdowns(rank, result)[1]:
            col.caption(t("multigpu.host_peak", size=fmt_bytes(rank["host_peak_bytes"])))
        if rank.get("oom"):
            col.error(t("multigpu.oom", rank=rank["rank"], phase=rank["oom"]["phase"], step=rank["oom"]["step"]))
    if est is not None and all_ranks:
        top = max((_net(r) for r in all_ranks if r.get("peak_bytes")), default=None)
        st.caption(t("multigpu.measured_vs_estimated", measured=fmt_bytes(top), estimated=fmt_bytes(est)))
    update = result.get("update_check")
    if update:
        text = t(
            "multigpu.update_ok" if update["ok"] else "multigpu.update_bad",
            diff=update["max_abs_diff"],
            update=update["max_update"],
        )
        (st.success if update["ok"] else st.warning)(text)
    df = ranks.frame(result)
    if not df.empty:
        st.markdown(f"##### {t('multigpu.chart.ranks')}")
        layout.altair(ranks.chart(df))
    split = [(t("multigpu.rank", rank=r["rank"]), *categories.rank_breakdowns(r, result)) for r in all_ranks]
    if any(dev is None and r.get("breakdown") for r, (_, dev, _h) in zip(all_ranks, split, strict=True)):
        st.caption(t("multigpu.host_mixed"))
    bdf = categories.frame(split)
    if not bdf.empty:
        st.markdown(f"##### {t('multigpu.chart.breakdown')}")
        layout.altair(categories.chart(bdf))
        if runs is not None:  # under the ranks' bars at their peaks, which both prompts talk about
            layout.prompts(meta, "memory", runs, key=f"{key}.memory")
            layout.prompts(meta, "breakdown", runs, key=f"{key}.breakdown")


def _recorded_runs(lesson_id: str, device: str) -> tuple[dict[str, dict], dict[str, str]]:
    """(strategy id -> recorded result, strategy id -> recorded id) of the lesson's runs recorded on `device`."""
    ids = recordings.prompt_recorded_ids(lesson_id, "memory", device)
    runs = {sid: backend.load_recorded(rid) for sid, rid in ids.items()}
    return {sid: r for sid, r in runs.items() if r is not None}, ids


def comparison(meta: dict, key: str, expanded: bool) -> None:
    """The lesson's strategies side by side from the recordings: 2 GPUs when shipped, else the CPU (gloo) ones."""
    device = "cuda"
    runs, ids = _recorded_runs(meta["id"], device)
    if not runs:
        device = "cpu"
        runs, ids = _recorded_runs(meta["id"], device)
    if not runs:
        return
    first = next(iter(runs.values()))
    date = str(first.get("started_at") or "")[:10]
    name = (first.get("device") or {}).get("name", "GPU")
    title = (
        t("multigpu.recorded", name=name, n=first.get("world_size"), date=date)
        if device == "cuda"
        else t("multigpu.recorded_cpu", date=date)
    )
    with st.expander(title, icon=":material/history:", expanded=expanded):
        if device == "cpu":
            st.caption(t("multigpu.no_gpu_recording"))
        # Short names on the charts: a half-width column at 1024 px has no room for the full titles.
        titles = {
            s["id"]: content.localized(s.get("short") or s.get("title"), lang(), s["id"])
            for s in meta.get("strategies") or []
        }
        full = {s["id"]: content.localized(s.get("title"), lang(), s["id"]) for s in meta.get("strategies") or []}
        items = [
            (t("multigpu.estimated_bar", label=titles.get(sid, sid)), *_estimated_split(r))
            if categories.awaits_split(r)
            else (titles.get(sid, sid), *categories.rank_breakdowns(r, r))
            for sid, r in runs.items()
        ]  # a breakdown that summed host and device: the estimate's split
        st.markdown(f"##### {t('multigpu.chart.compare')}")
        if any(categories.awaits_split(r) for r in runs.values()):
            st.caption(t("multigpu.host_estimated"))
        checked = {sid: categories.as_measured(r) for sid, r in runs.items()}
        layout.chart(categories.chart(categories.frame(items)), meta, "memory", checked, key=f"{key}.memory")
        layout.prompts(meta, "breakdown", checked, key=f"{key}.breakdown")
        sdf = step_time.frame([(titles.get(sid, sid), r.get("step_ms")) for sid, r in runs.items()])
        if not sdf.empty:
            st.markdown(f"##### {t('multigpu.chart.time')}")
            layout.chart(step_time.chart(sdf), meta, "time", checked, key=f"{key}.time")
        pick = st.selectbox(
            t("recorded.pick"),
            list(runs),
            format_func=lambda sid: full.get(sid, sid),
            key=widget_state.labelled(f"{key}.pick"),
        )
        show_result(runs[pick], meta, key=f"{key}.{pick}")
        st.caption(ids[pick])


def _estimated_split(result: dict) -> tuple[dict | None, dict | None]:
    """(device, host) categories of a CPU-offload rank by the estimate: the recorded estimate's device categories,
    and the rank's shards of the model states that the offload keeps on the host."""
    est = result.get("estimate") or {}
    host = est.get("host_categories")
    if host is None and result.get("distributed"):
        host = backend.offload_host_categories(result["distributed"])
    return est.get("categories"), host
