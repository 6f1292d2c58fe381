"""A job that failed or was refused, said in the page's units and language, with what would fit."""

from __future__ import annotations

import streamlit as st

from app import backend, job_errors
from app.i18n import t
from app.ui import widget_state
from course.fit import largest_fitting_batch
from course.units import fmt_bytes

BESIDE = {"paged_memory": "error.paged_memory", "pinned_memory": "error.pinned_memory"}


def job_failed(status: dict, label: str | None = None, config: dict | None = None, ns: str | None = None) -> None:
    """A finished job that gave no result: the engine's message; a run refused as too large is explained."""
    message = status.get("error") or t("jobs.state." + str(status.get("state")))
    failure = job_errors.failure(status)
    kind, code = (failure.type, failure.code) if failure else (None, None)
    if kind == "WouldNotFit" and code == "max_peak_gib":
        st.warning(t("error.operator_cap", limit=f"{backend.operator_cap_gib():g} GiB"))
        return
    if kind == "WouldNotFit" and code in BESIDE and failure.params:
        # Memory beside the device's allocator: forcing the run does not lift it, so no force hint.
        need, free = (fmt_bytes(failure.params.get(k) or 0) for k in ("peak_bytes", "available_bytes"))
        st.warning(f"{label}: " * bool(label) + t(BESIDE[code], need=need, free=free))
        return
    if kind == "WouldNotFit" and config and refused(config, label, ns):
        return
    if kind == "WorkerDied":  # the engine's sentence is English; this one is the page's language
        message = t("error.worker_died" if status.get("retried") else "error.worker_died_once")
    st.error(t("error.worker", message=f"{label}: {message}" if label else message))
    if kind == "WouldNotFit":
        st.info(t("error.would_not_fit"))


def refused(config: dict, label: str | None = None, ns: str | None = None) -> bool:
    """The refusal of a run whose estimate is far above the memory available: sizes, and what would fit."""
    cfg, err = backend.config(config)
    if err:
        return False
    capacity = backend.capacity_bytes(cfg)
    est, _ = backend.estimate(cfg, capacity, wait=None)  # a decision: its estimate, not "pending"
    if not est or not capacity:
        return False
    prefix = f"{label}: " if label else ""
    st.warning(prefix + t("error.refused", peak=fmt_bytes(est["peak_bytes"]), capacity=fmt_bytes(capacity)))
    fitting_batch(cfg, capacity, ns, f"{ns}.refused")
    st.caption(t("error.force_hint"))
    return True


def out_of_memory(result: dict, ns: str | None = None, key: str = "run") -> None:
    """A run that ran out of memory: where, the allocator's message and sizes, and the batch that would fit."""
    oom = result["oom"]
    phase = t("phase." + str(oom.get("phase")), default=str(oom.get("phase")))
    st.error(t("oom.title", phase=phase, step=oom.get("step", "?")))
    st.code(str(oom.get("message", ""))[:2000], language=None, wrap_lines=True)
    cols = st.columns(3)
    cols[0].metric(t("oom.requested"), fmt_bytes(oom.get("requested_bytes")))
    cols[1].metric(t("oom.in_use"), fmt_bytes(oom.get("in_use_bytes")))
    cols[2].metric(t("oom.budget"), fmt_bytes(oom.get("budget_bytes")))
    if oom.get("budget_bytes") and (result.get("device") or {}).get("type") == "cuda":
        st.caption(t("oom.budget_caveat"))
    cfg, err = backend.config(result.get("config") or {})
    if err:  # advice is optional; the OOM itself is already shown
        return
    capacity = oom.get("budget_bytes") or backend.capacity_bytes(cfg)
    if capacity:
        fitting_batch(cfg, capacity, ns, key)


def fitting_batch(cfg, capacity: int, ns: str | None, key: str) -> None:
    """The largest batch the estimate fits into `capacity`, and a button that sets it in the sandbox."""
    batch = largest_fitting_batch(cfg, capacity, lambda c: backend.estimate(c, capacity, wait=None)[0], upper=cfg.batch)
    if batch is None:
        st.info(t("oom.nothing_fits", capacity=fmt_bytes(capacity)))
        return
    st.info(t("oom.would_fit", batch=batch, capacity=fmt_bytes(capacity)))
    if ns:
        # One press of Run then confirms it with a real run.
        st.button(
            t("oom.use_batch", batch=batch),
            key=f"{key}.use_batch",
            on_click=widget_state.set_values,
            args=(ns, {"batch": batch}),
            icon=":material/tune:",
        )
