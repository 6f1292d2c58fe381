"""Shows one experiment result: device label, key figures, OOM advice, charts with prompts, downloads."""

from __future__ import annotations

import json

import streamlit as st

from app.charts import breakdown, memory, profile, step_time
from app.charts import driver as driver_chart
from app.i18n import t
from app.ui import failures, layout, side_by_side, timeline
from app.ui.errors import engine_error
from course.units import fmt_bytes


def device_label(result: dict, recorded_at: str | None = None) -> None:
    device = result.get("device") or {}
    torch_version = device.get("torch_version", "?")
    if device.get("type") == "cuda":
        text = t("result.gpu", name=device.get("name", "GPU"), torch=torch_version)
        if recorded_at:
            text += " · " + t("result.recorded_at", date=str(recorded_at)[:10])
        st.caption(text)
    else:
        st.info(t("result.cpu", name=device.get("name", "CPU"), torch=torch_version))


def render_status(
    status: dict,
    meta: dict,
    *,
    current,
    ran: dict | None,
    driver: bool = False,
    key: str = "run",
    previous: dict | None = None,
) -> None:
    """A finished job's status: result, cancellation or error."""
    state = status.get("state")
    if state == "error":
        failures.job_failed(status, config=ran, ns=key)
        return
    result = status.get("result")
    if state == "cancelled" and not result:
        st.warning(t("jobs.cancelled"))
        return
    if result is None:
        engine_error(status.get("error") or t("jobs.no_result"))
        return
    st.divider()
    st.subheader(t("result.title"))
    if current is not None and ran is not None and current.to_dict() != ran:
        st.warning(t("result.stale"))
    if state == "cancelled" or result.get("cancelled"):
        st.warning(t("result.cancelled"))
    if status.get("cached"):
        st.caption(t("result.cached"))
    render_run(result, meta, driver=driver, key=key, ns=key, previous=previous)


def _metrics(result: dict) -> None:
    peak_phase = result.get("peak_phase") or {}
    step_ms = result.get("step_ms") or {}
    # Two per row: the right column is too narrow for four metrics with phase names in them.
    cols = st.columns(2) + st.columns(2)
    cols[0].metric(t("metric.peak"), fmt_bytes(result.get("peak_bytes")))
    if peak_phase.get("phase"):
        where = t("phase." + peak_phase["phase"], default=peak_phase["phase"])
        step = peak_phase.get("step")
        label = t("metric.peak_phase_step", step=step) if step else t("metric.peak_phase")
        cols[1].metric(label, where)
    cols[2].metric(t("metric.step_ms"), f"{step_ms['median']:,.2f}" if step_ms.get("median") is not None else "—")
    sps = result.get("samples_per_s")
    cols[3].metric(t("metric.samples_per_s"), f"{sps:,.0f}" if sps else "—")
    if result.get("baseline_bytes"):
        st.caption(t("metric.baseline", value=fmt_bytes(result["baseline_bytes"])))
    if result.get("tflops"):
        st.caption(t("metric.tflops", value=f"{result['tflops']:.3g}"))


def render_run(
    result: dict,
    meta: dict,
    *,
    driver: bool = False,
    recorded_at: str | None = None,
    key: str = "run",
    ns: str | None = None,
    previous: dict | None = None,
) -> None:
    """`ns`: the sandbox the prompts' Apply buttons set; `previous`: the run before, for their predictions."""
    device_label(result, recorded_at)
    where = {"runs": {"run": result}, "ns": ns, "previous": previous, "key": key}
    if result.get("oom"):
        failures.out_of_memory(result, ns=ns, key=key)
    _metrics(result)

    df = memory.frame(result)
    sections = (
        memory.section(df),
        driver_chart.section(result) if driver else None,
        breakdown.section(result),
        step_time.section(result),
    )
    for part in sections:
        if part is not None:
            layout.section(part, meta, **where)

    timeline.expander(result, key)  # every allocation of the run, its segments, the raw snapshot

    if not df.empty:
        with st.expander(t("result.phases_table")):
            st.dataframe(memory.table(df), hide_index=True, width="stretch")
    cols = st.columns(2)
    cols[0].download_button(
        t("download.csv"),
        df.to_csv(index=False),
        file_name="phases.csv",
        mime="text/csv",
        key=f"{key}.csv",
        width="stretch",
    )
    cols[1].download_button(
        t("download.json"),
        # Made when clicked, not on every page run (and kept in memory for each): a result with its allocation
        # history is hundreds of kB.
        lambda: json.dumps(result, indent=1, default=str),
        file_name="result.json",
        mime="application/json",
        key=f"{key}.json",
        width="stretch",
    )
    if result.get("memory_summary"):
        with st.expander(t("result.memory_summary")):
            st.code(result["memory_summary"], language=None)
    side_by_side.controls(result, key, recorded=recorded_at is not None)


def render_profile(result: dict) -> None:
    """profile_step rows as a sortable table (by self device memory; self CPU memory in CPU mode)."""
    device = result.get("device") or {}
    if device.get("type") != "cuda":
        st.info(t("profile.cpu"))
    df, sorted_by = profile.table(result.get("rows") or [], device.get("type", "cpu"))
    st.caption(t("profile.sorted", column=sorted_by))
    st.dataframe(df, hide_index=True, width="stretch", height=420)
    if result.get("memory_summary"):
        st.markdown(f"##### {t('result.memory_summary')}")
        st.code(result["memory_summary"], language=None)


def successful(done: dict) -> list[tuple[str, dict]]:
    """(label, result) of every finished job of a group; the failed ones are reported in place."""
    ok = []
    for spec, status in zip(done["specs"], done["statuses"], strict=True):
        if status.get("state") == "done" and status.get("result"):
            ok.append((spec["label"], status["result"]))
        else:
            failures.job_failed(status, spec["label"])
    return ok
