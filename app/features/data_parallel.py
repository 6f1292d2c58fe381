"""Lesson 6's sandbox: the training sandbox's widgets plus strategy, world size and batch mode; the per-rank
estimate with the ZeRO paper's figures beside it; and "what fits" a device's capacity."""

from __future__ import annotations

import streamlit as st

from app import backend
from app.charts import categories
from app.i18n import t
from app.ui import layout, sandbox, sizing, urlstate, widget_state
from app.ui.errors import engine_error
from course.units import MIB, fmt_bytes

NS = "multigpu"
# The ZeRO paper's stages, as the page names them and as the estimate's "zero_paper" keys them.
STAGES = (("ddp", "ddp"), ("z1", "zero1"), ("z2", "zero2"), ("z3", "zero3"))


def _choice(field: str, options, default, label: str, widget, **kw):
    k = f"{NS}_{field}"
    urlstate.init(k, default, lambda raw: urlstate.one_of(options)(type(default)(raw)))
    if "labels" in kw:  # resolved now, in this run's language (a format_func calling t() later would not be)
        kw["format_func"] = kw.pop("labels").__getitem__
        widget_state.labelled(k)
    value = widget(label, options, key=k, persist_state="session", **kw)
    urlstate.sync(k, value, default)
    return value


def controls(meta: dict):
    """The sandbox's widgets plus strategy, world size and batch mode; (config, why it cannot run here)."""
    base, _ = sandbox.base_config(sizing.of(meta))
    dist = meta.get("distributed") or {}
    options = backend.distributed_options()
    with st.container(border=True):
        st.subheader(t("multigpu.sandbox"))
        cols = st.columns(2)
        strategy = _choice(
            "strategy",
            list(options["strategy"]),
            "ddp",
            t("multigpu.strategy"),
            cols[0].selectbox,
            labels={s: t("multigpu.opt." + s) for s in options["strategy"]},
        )
        world = _choice(
            "world_size",
            list(options["world_size"]),
            int(dist.get("world_size", 2)),
            t("multigpu.world_size"),
            cols[1].select_slider,
        )
        mode = _choice(
            "batch_mode",
            list(options["batch_mode"]),
            dist.get("batch_mode", "per_rank"),
            t("multigpu.batch_mode"),
            st.radio,
            labels={m: t("multigpu.mode." + m) for m in options["batch_mode"]},
            horizontal=True,
        )
        values, _slots = sandbox.config_widgets(NS, base)
        cfg, err = sandbox.validate(base, values)
        if err:
            st.error(t("config.invalid", message=sandbox.explain(err, values)))
            return None, None
        dcfg, err = backend.distributed_config(cfg, strategy, world, mode)
        if err:
            st.error(t("config.invalid", message=sandbox.explain(err)))
            return None, None
        st.caption(t("multigpu.batches", per_rank=dcfg.per_rank_batch, total=dcfg.global_batch))
    return dcfg, backend.distributed_unavailable(dcfg)


def show_estimate(dcfg) -> None:
    est, err = backend.estimate(dcfg)
    if sandbox.pending_estimate(err, lambda: backend.estimate(dcfg, wait=0)[1]):
        return
    if err:
        engine_error(err)
        return
    with st.container(border=True):
        st.subheader(t("estimate.title"))
        # One metric per row: two side by side cut their labels in a half-width column on a projector.
        low, high = est["peak_bytes"], est.get("peak_high_bytes") or est["peak_bytes"]
        st.metric(t("multigpu.estimate"), fmt_bytes(low) if high <= low else f"{fmt_bytes(low)} – {fmt_bytes(high)}")
        st.metric(t("multigpu.estimate_single"), fmt_bytes(est["single_device_peak_bytes"]))
        paper = est["zero_paper"]
        psi = est["parameter_bytes"] // (2 if dcfg.config.precision == "bf16" else 4)
        st.caption(
            t("multigpu.paper", psi=f"{psi:,}", n=dcfg.world_size, **{k: fmt_bytes(paper[v]) for k, v in STAGES})
        )
        if est.get("zero_this_run"):
            st.caption(t("multigpu.paper_run", **{k: fmt_bytes(est["zero_this_run"][v]) for k, v in STAGES}))
        if high > low:
            st.caption(t("multigpu.estimate_range", copy=fmt_bytes(high - low)))
        st.caption(t("multigpu.method." + ("replay" if "replayed" in est.get("method", "") else "model")))
        if est.get("unmeasured"):
            st.caption(t("estimate.not_predicted", n=len(est["unmeasured"])))
        what = dcfg.strategy if dcfg.strategy.startswith("ddp") else "fsdp"
        st.caption(
            t("multigpu.comm", size=fmt_bytes(est["communication"]["per_step_bytes"]), what=t("multigpu.comm." + what))
        )
        # Under CPU offload the rank's shards live in host memory: a bar of their own, beside the device's.
        df = categories.frame([(t("source.estimated"), est["categories"], est.get("host_categories"))])
        if not df.empty:
            layout.altair(categories.chart(df))


def show_what_fits(dcfg) -> None:
    """The fewest devices, then the strategy with the least traffic, that hold this configuration by the estimate."""
    info, _ = backend.safe_device_info()
    # MiB, the unit of every figure here: the worker's own device (its GPU, or the CPU's memory) to start with.
    total = (info or {}).get("total_bytes")
    default = min(int(backend.BUDGET_MB[1]), int(total // MIB)) if total else 80 * 1024
    with st.expander(t("multigpu.fits_title"), icon=":material/straighten:"):
        mib = st.number_input(
            t("multigpu.capacity"),
            min_value=1,
            max_value=int(backend.BUDGET_MB[1]),
            value=default,
            step=1024,
            key=f"{NS}_capacity",
        )
        if total:
            st.caption(t("multigpu.capacity_default", capacity=fmt_bytes(default * MIB)))
        capacity = int(mib) * MIB
        asked = (dcfg.config.to_dict(), capacity, dcfg.batch_mode)
        if st.button(t("multigpu.fits_run"), key=f"{NS}.fits"):
            with st.spinner(t("multigpu.fits_running")):
                fit, err = backend.what_fits(dcfg, capacity, wait=60)  # asked for: this tab waits, no other
            if err:
                engine_error(err)
                return
            st.session_state[f"{NS}.fits_result"] = (asked, fit)
        shown = st.session_state.get(f"{NS}.fits_result")
        if shown and shown[0] == asked:
            fit, cap = shown[1], fmt_bytes(capacity)
            if fit is None:
                st.warning(_nothing_fits(dcfg, cap))
            elif fit["strategy"] == "single":
                st.success(t("multigpu.fits_single", capacity=cap, peak=fmt_bytes(fit["peak_bytes"])))
            else:
                st.success(
                    t(
                        "multigpu.fits",
                        capacity=cap,
                        n=fit["world_size"],
                        strategy=t("multigpu.opt." + fit["strategy"]),
                        peak=fmt_bytes(fit.get("peak_high_bytes") or fit["peak_bytes"]),
                    )
                )
        st.caption(t("multigpu.fits_how"))


def _nothing_fits(dcfg, capacity: str) -> str:
    """Why nothing fits, and what could help: where communication buffers are the largest part of the most sharded
    rank, a smaller batch or checkpointing (the usual advice) cannot."""
    most = max(backend.distributed_options()["world_size"])
    sharded, err = backend.distributed_config(dcfg.config, "fsdp2_zero3", most, dcfg.batch_mode)
    est = None if err else backend.estimate(sharded, wait=None)[0]
    cats = (est or {}).get("categories") or {}
    if cats and max(cats, key=cats.get) == "communication":
        return t(
            "multigpu.fits_none_comm",
            n=most,
            capacity=capacity,
            peak=fmt_bytes(est["peak_bytes"]),
            comm=fmt_bytes(cats["communication"]),
        )
    return t("multigpu.fits_none", capacity=capacity)
