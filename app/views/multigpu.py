import streamlit as st

from app import charts, content, engine, frames, jobs, layout, multigpu_charts, results, sandbox, urlstate
from app.i18n import lang, t
from experiments.config import ConfigError
from experiments.distributed import BATCH_MODES, STRATEGIES, DistributedConfig, device_type_for
from experiments.distributed_lesson import recorded_id, runs_by_strategy

NS = "multigpu"


@st.cache_data(max_entries=256, show_spinner=False)
def _estimate(params: tuple, device_type: str, workspaces: tuple | None) -> dict:
    from experiments.sharding import estimate_sharded

    return estimate_sharded(DistributedConfig.from_dict(dict(params)), device_type=device_type,
                            transients=dict(workspaces or ()))


@st.cache_data(max_entries=64, show_spinner=False)
def _what_fits(config: tuple, capacity: int, device_type: str, mode: str, workspaces: tuple | None) -> dict | None:
    from experiments.sharding import what_fits

    return what_fits(dict(config), capacity, device_type=device_type, batch_mode=mode, transients=dict(workspaces or ()))


def show_what_fits(dcfg: DistributedConfig) -> None:
    """The fewest devices, then the strategy with the least traffic, that hold this configuration by the estimate."""
    device_type = engine.device_type(dcfg.config)
    info, _ = engine.safe_device_info()
    # MiB, the unit of every figure here: a CPU-sized lesson's configuration needs only a few.
    default = int((info or {}).get("total_bytes", 80 * 2**30) // 2**20) if device_type == "cuda" else 80 * 1024
    with st.expander(t("multigpu.fits_title"), icon=":material/straighten:"):
        mib = st.number_input(t("multigpu.capacity"), min_value=1, max_value=4 * 2**20, value=default, step=1024,
                              key=f"{NS}_capacity")
        capacity = int(mib) * 2**20
        args = (tuple(sorted(dcfg.config.to_dict().items())), capacity, device_type, dcfg.batch_mode,
                engine.workspaces() if device_type == "cuda" else None)
        if st.button(t("multigpu.fits_run"), key=f"{NS}.fits"):
            with st.spinner(t("multigpu.fits_running")):
                try:
                    st.session_state[f"{NS}.fits_result"] = (args, _what_fits(*args))
                except Exception as exc:  # noqa: BLE001 - an estimate failure is a message, not a crash
                    layout.error(f"{type(exc).__name__}: {exc}")
                    return
        shown = st.session_state.get(f"{NS}.fits_result")
        if shown and shown[0] == args:
            fit, cap = shown[1], results.fmt_bytes(capacity)
            if fit is None:
                st.warning(t("multigpu.fits_none", capacity=cap))
            elif fit["strategy"] == "single":
                st.success(t("multigpu.fits_single", capacity=cap, peak=results.fmt_bytes(fit["peak_bytes"])))
            else:
                st.success(t("multigpu.fits", capacity=cap, n=fit["world_size"],
                             strategy=t("multigpu.opt." + fit["strategy"]),
                             peak=results.fmt_bytes(fit.get("peak_high_bytes") or fit["peak_bytes"])))
        st.caption(t("multigpu.fits_how"))


def _choice(field: str, options, default, label: str, widget, **kw):
    k = f"{NS}_{field}"
    urlstate.init(k, default, lambda raw: type(default)(raw) if type(default)(raw) in options else default)
    value = widget(label, options, key=k, persist_state="session", **kw)
    urlstate.sync(k, value, default)
    return value


def controls(meta: dict) -> tuple[DistributedConfig | None, str | None]:
    """The sandbox's widgets plus strategy, world size and batch mode; (config, why it cannot run here)."""
    base, _ = sandbox.base_config(meta)
    dist = meta.get("distributed") or {}
    with st.container(border=True):
        st.subheader(t("multigpu.sandbox"))
        cols = st.columns(2)
        strategy = _choice("strategy", list(STRATEGIES), "ddp", t("multigpu.strategy"), cols[0].selectbox,
                           format_func=lambda s: t("multigpu.opt." + s))
        world = _choice("world_size", list(range(1, 9)), int(dist.get("world_size", 2)), t("multigpu.world_size"),
                        cols[1].select_slider)
        mode = _choice("batch_mode", list(BATCH_MODES), dist.get("batch_mode", "per_rank"), t("multigpu.batch_mode"),
                       st.radio, format_func=lambda m: t("multigpu.mode." + m), horizontal=True)
        values, slots = sandbox.config_widgets(NS, base)
        cfg, err = sandbox.validate(base, values)
        if err:
            st.error(t("config.invalid", message=sandbox.explain(err, values)))
            return None, None
        try:
            dcfg = DistributedConfig(cfg, strategy=strategy, world_size=world, batch_mode=mode)
        except ConfigError as exc:
            st.error(t("config.invalid", message=str(exc)))
            return None, None
        st.caption(t("multigpu.batches", per_rank=dcfg.per_rank_batch, total=dcfg.global_batch))
    try:
        _device_check(dcfg)
    except ConfigError as exc:
        return dcfg, str(exc)
    return dcfg, None


def _device_check(dcfg: DistributedConfig) -> None:
    """What the worker's machine can run: its device type and GPU count (the page never touches CUDA itself)."""
    info, _ = engine.safe_device_info()
    if (info or {}).get("type") == "cuda" and dcfg.config.device != "cpu":
        count = info.get("device_count")  # when the worker reports it; otherwise the engine checks at Run
        if count and dcfg.world_size > count:
            raise ConfigError("world_size", f"got {dcfg.world_size}; this machine has {count} GPU(s): allowed range "
                                            f"is [1, {count}] (one process per GPU)")
        return
    device_type_for(DistributedConfig(dcfg.config.replace(device="cpu"), dcfg.strategy, dcfg.world_size,
                                      dcfg.batch_mode))


def show_estimate(dcfg: DistributedConfig) -> None:
    device_type = engine.device_type(dcfg.config)
    try:
        est = _estimate(tuple(sorted(dcfg.to_dict().items())), device_type,
                        engine.workspaces() if device_type == "cuda" else None)
        if est.get("unmeasured"):
            engine.measure_later(est["unmeasured"])
    except Exception as exc:  # noqa: BLE001 - an estimate failure is a message, not a crash
        layout.error(f"{type(exc).__name__}: {exc}")
        return
    with st.container(border=True):
        st.subheader(t("estimate.title"))
        # One metric per row: two side by side cut their labels in a half-width column on a projector.
        low, high = est["peak_bytes"], est.get("peak_high_bytes") or est["peak_bytes"]
        st.metric(t("multigpu.estimate"), results.fmt_bytes(low) if high <= low else
                  f"{results.fmt_bytes(low)} – {results.fmt_bytes(high)}")
        st.metric(t("multigpu.estimate_single"), results.fmt_bytes(est["single_device_peak_bytes"]))
        paper = est["zero_paper"]
        psi = est["parameter_bytes"] // (2 if dcfg.config.precision == "bf16" else 4)
        stages = (("ddp", "ddp"), ("z1", "zero1"), ("z2", "zero2"), ("z3", "zero3"))
        st.caption(t("multigpu.paper", psi=f"{psi:,}", n=dcfg.world_size,
                     **{k: results.fmt_bytes(paper[v]) for k, v in stages}))
        if est.get("zero_this_run"):
            st.caption(t("multigpu.paper_run", **{k: results.fmt_bytes(est["zero_this_run"][v]) for k, v in stages}))
        if high > low:
            st.caption(t("multigpu.estimate_range", copy=results.fmt_bytes(high - low)))
        st.caption(t("multigpu.method." + ("replay" if "replayed" in est.get("method", "") else "model")))
        if est.get("unmeasured"):
            st.caption(t("estimate.not_predicted", n=len(est["unmeasured"])))
        what = dcfg.strategy if dcfg.strategy.startswith("ddp") else "fsdp"
        st.caption(t("multigpu.comm", size=results.fmt_bytes(est["communication"]["per_step_bytes"]),
                     what=t("multigpu.comm." + what)))
        # Under CPU offload the rank's shards live in host memory: a bar of their own, beside the device's.
        df = multigpu_charts.categories_frame([(t("source.estimated"), est["categories"], est.get("host_categories"))])
        if not df.empty:
            st.altair_chart(multigpu_charts.categories_chart(df), width="stretch")


def show_result(result: dict, meta: dict, key: str) -> None:
    device = result.get("device") or {}
    name = device.get("name") if device.get("type") == "cuda" else "CPU"
    st.caption(t("multigpu.device", device=name, n=result.get("world_size"), backend=result.get("backend"),
                 torch=device.get("torch_version", "?")))
    if device.get("type") != "cuda":
        st.info(t("multigpu.cpu_note"))
    if result.get("errors"):
        st.error(t("multigpu.errors", errors="; ".join(result["errors"])))
    est = (result.get("estimate") or {}).get("peak_bytes")
    ranks = result.get("ranks") or []
    cols = st.columns(min(len(ranks), 4) or 1)
    for col, rank in zip(cols, ranks, strict=False):
        net = None if rank.get("peak_bytes") is None else rank["peak_bytes"] - (rank.get("baseline_bytes") or 0)
        col.metric(t("multigpu.peak", rank=rank["rank"]), results.fmt_bytes(net))
        if multigpu_charts.rank_breakdowns(rank, result)[1]:
            col.caption(t("multigpu.host_peak", size=results.fmt_bytes(rank["host_peak_bytes"])))
        if rank.get("oom"):
            col.error(t("multigpu.oom", rank=rank["rank"], phase=rank["oom"]["phase"], step=rank["oom"]["step"]))
    if est is not None and ranks:
        top = max((r["peak_bytes"] - (r.get("baseline_bytes") or 0) for r in ranks if r.get("peak_bytes")), default=None)
        st.caption(t("multigpu.measured_vs_estimated", measured=results.fmt_bytes(top), estimated=results.fmt_bytes(est)))
    update = result.get("update_check")
    if update:
        text = t("multigpu.update_ok" if update["ok"] else "multigpu.update_bad", diff=update["max_abs_diff"],
                 update=update["max_update"])
        (st.success if update["ok"] else st.warning)(text)
    df = multigpu_charts.ranks_frame(result)
    if not df.empty:
        st.markdown(f"##### {t('multigpu.chart.ranks')}")
        st.altair_chart(multigpu_charts.ranks_chart(df), width="stretch")
    split = [(t("multigpu.rank", rank=r["rank"]), *multigpu_charts.rank_breakdowns(r, result)) for r in ranks]
    if any(device is None and r.get("breakdown") for r, (_, device, _h) in zip(ranks, split, strict=True)):
        st.caption(t("multigpu.host_mixed"))
    bdf = multigpu_charts.categories_frame(split)
    if not bdf.empty:
        st.markdown(f"##### {t('multigpu.chart.breakdown')}")
        st.altair_chart(multigpu_charts.categories_chart(bdf), width="stretch")


def comparison(meta: dict, key: str) -> None:
    """The lesson's strategies side by side from the recordings: 2 GPUs when shipped, else the CPU (gloo) ones."""
    runs, device = runs_by_strategy("cuda", engine.load_recorded), "cuda"
    if not runs:
        runs, device = runs_by_strategy("cpu", engine.load_recorded), "cpu"
    if not runs:
        return
    first = next(iter(runs.values()))
    date = str(first.get("started_at") or "")[:10]
    name = (first.get("device") or {}).get("name", "GPU")
    title = t("multigpu.recorded", name=name, n=first.get("world_size"), date=date) if device == "cuda" \
        else t("multigpu.recorded_cpu", date=date)
    with st.expander(title, icon=":material/history:", expanded=not jobs.finished(NS)):
        if device == "cpu":
            st.caption(t("multigpu.no_gpu_recording"))
        # Short names on the charts: a half-width column at 1024 px has no room for the full titles.
        titles = {s["id"]: content.localized(s.get("short") or s.get("title"), lang(), s["id"])
                  for s in meta.get("strategies") or []}
        full = {s["id"]: content.localized(s.get("title"), lang(), s["id"]) for s in meta.get("strategies") or []}
        items = []
        for sid, r in runs.items():
            if multigpu_charts.awaits_split(r):
                # Its measured categories sum host and device memory: the estimate's split stands in, said so.
                items.append((t("multigpu.estimated_bar", label=titles.get(sid, sid)),
                              *multigpu_charts.estimated_split(r)))
            else:
                items.append((titles.get(sid, sid), *multigpu_charts.rank_breakdowns(r, r)))
        st.markdown(f"##### {t('multigpu.chart.compare')}")
        if any(multigpu_charts.awaits_split(r) for r in runs.values()):
            st.caption(t("multigpu.host_estimated"))
        checked = {sid: multigpu_charts.as_measured(r) for sid, r in runs.items()}
        layout.chart(multigpu_charts.categories_chart(multigpu_charts.categories_frame(items)), meta, "memory",
                     checked, key=f"{key}.memory")
        layout.prompts(meta, "breakdown", checked, key=f"{key}.breakdown")
        sdf = frames.step_time_frame([(titles.get(sid, sid), r.get("step_ms")) for sid, r in runs.items()])
        if not sdf.empty:
            st.markdown(f"##### {t('multigpu.chart.time')}")
            layout.chart(charts.step_time_chart(sdf), meta, "time", checked, key=f"{key}.time")
        pick = st.selectbox(t("recorded.pick"), list(runs), format_func=lambda sid: full.get(sid, sid),
                            key=f"{key}.pick")
        show_result(runs[pick], meta, key=f"{key}.{pick}")
        st.caption(recorded_id(device, pick))


meta, _, right = layout.lesson_page("multigpu")
with right:
    dcfg, unavailable = controls(meta)
    if dcfg is not None:
        show_estimate(dcfg)
        if unavailable:
            st.warning(t("multigpu.unavailable", message=unavailable))
        label = t("multigpu.job", strategy=t("multigpu.opt." + dcfg.strategy), n=dcfg.world_size)
        if st.button(t("multigpu.run"), key=f"{NS}.run", type="primary", width="stretch",
                     disabled=bool(unavailable) or jobs.pending(NS)):
            jobs.start(NS, [{"label": label, "kind": "distributed", "params": dcfg.to_dict()}])
        show_what_fits(dcfg)
    jobs.poll(NS)
    done = jobs.finished(NS)
    if done:
        status = done["statuses"][0]
        if status.get("state") == "done" and status.get("result"):
            st.subheader(t("multigpu.result"))
            show_result(status["result"], meta, key=f"{NS}.live")
        else:
            results.job_error(status.get("error") or t("jobs.state." + str(status.get("state"))))
    comparison(meta, key=f"{NS}.recorded")
