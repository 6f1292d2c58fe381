"""Lesson 6's live run, shown as every lesson shows its run: the per-rank result with the lesson's prompts checked
against it, each rank's step time, the ranks' phases on a time axis, and the pin that sets it beside another
result on any page."""

from __future__ import annotations

import streamlit as st

from app.charts import categories, rank_phases, step_time
from app.features import data_parallel_result
from app.i18n import t
from app.ui import layout, side_by_side


def strategy_id(meta: dict, result: dict) -> str | None:
    """The lesson's strategy this run is one of: the same strategy, with the most of its configuration changes
    equal to the run's (a DDP run at width 256, batch 4096 is the big-batch DDP), or None."""
    config, best = result.get("config") or {}, None
    for s in meta.get("strategies") or []:
        changes = s.get("config") or {}
        if s.get("strategy") == result.get("strategy") and all(config.get(k) == v for k, v in changes.items()):
            if best is None or len(changes) > len(best[1]):
                best = (s["id"], changes)
    return best[0] if best else None


def runs(meta: dict, result: dict) -> dict:
    """What the prompts are checked against: this run, under "run" and under its strategy's id. A check that
    compares two strategies has one of them missing here and confirms nothing; it does not read a recording."""
    checked = categories.as_measured(result)
    sid = strategy_id(meta, result)
    return {"run": checked, **({sid: checked} if sid else {})}


def show(result: dict, meta: dict, key: str) -> None:
    checked = runs(meta, result)
    data_parallel_result.show_result(result, meta, key, runs=checked)
    ranks = result.get("ranks") or []
    sdf = step_time.frame([(t("multigpu.rank", rank=r["rank"]), r.get("step_ms")) for r in ranks])
    if not sdf.empty:
        st.markdown(f"##### {t('multigpu.chart.rank_time')}")
        layout.chart(step_time.chart(sdf), meta, "time", checked, key=f"{key}.time")
    with st.expander(t("multigpu.timeline.title"), icon=":material/timeline:"):
        # A rank records its phases, not each allocation: the time axis is the phases' own measured durations.
        st.caption(t("multigpu.timeline.what"))
        df = rank_phases.frame(result)
        if df.empty:
            st.caption(t("multigpu.timeline.none"))
        else:
            layout.altair(rank_phases.chart(df))
    side_by_side.controls(result, key)
    st.caption(t("multigpu.pin_rank0"))
