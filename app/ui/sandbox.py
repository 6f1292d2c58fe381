"""The experiment sandbox shared by the lesson pages: config widgets (bound to the URL), validation,
estimate, Run/Cancel through the worker, and the results of the page's last run."""

from __future__ import annotations

import streamlit as st

from app import backend
from app.backend import BOOLS, CHOICES, RANGES, ConfigError, ExperimentConfig
from app.charts import breakdown
from app.i18n import t
from app.ui import jobs, layout, options, results, sizing, urlstate, widget_state
from app.ui.errors import engine_error
from course import content

SELECT = tuple(CHOICES)


def base_config(size: sizing.Size, full: bool = False) -> tuple[ExperimentConfig, str | None]:
    """The lesson's preset over the engine defaults at this page's size (app/ui/sizing.py), or at full size where
    `full`; the defaults alone if the preset is invalid."""
    cfg, err = backend.config(content.over_preset(size.meta, None) if full else size.over_preset())
    return (cfg, None) if err is None else (ExperimentConfig(), str(err))


def _widget(ns: str, field: str, default, container) -> object:
    k = widget_state.key(ns, field)
    urlstate.init(k, default, lambda raw: backend.field_value(field, raw))
    current = st.session_state[k]
    common = {"key": k, "help": t("help." + field, default="") or None, "persist_state": "session"}
    label = t("field." + field)
    if field == "model":
        common["on_change"], common["args"] = _keep_heads_valid, (ns,)
    if field in SELECT:
        choices = list(backend.SANDBOX_OPTIMIZERS if field == "optimizer" else CHOICES[field])
        # Labels are resolved now: a format_func called later (AppTest does) must not re-read the language.
        labels = {v: t(f"opt.{field}.{v}", default=str(v)) for v in choices}
        widget_state.labelled(k)
        return container.selectbox(label, choices, format_func=labels.__getitem__, **common)
    if field in options.LISTS:
        # A keyed select_slider keeps its identity when its options change, so a shared odd value
        # (batch=100) can simply join the list.
        return container.select_slider(label, sorted(set(options.LISTS[field]) | {default, current}), **common)
    if field in options.SLIDERS:
        return container.slider(label, *RANGES[field], **common)
    if field in BOOLS:
        return container.toggle(label, **common)
    if field == "seed":
        return container.number_input(label, *RANGES["seed"], step=1, **common)
    if field == "budget_mb":
        lo, hi = options.budget_bounds()
        return container.number_input(
            label, min_value=lo, max_value=hi, step=64.0, placeholder=t("budget.none"), **common
        )
    raise KeyError(field)


def _keep_heads_valid(ns: str) -> None:
    """Switching to the transformer keeps the width a multiple of heads x 8 (the head dimension a multiple of 8):
    a lesson's width (1000, or 250 at CPU size) would otherwise open on an error."""
    if st.session_state.get(widget_state.key(ns, "model")) != "transformer":
        return
    heads = st.session_state.get(widget_state.key(ns, "heads"), ExperimentConfig.heads)
    width_key, step = widget_state.key(ns, "width"), int(heads) * 8
    width = int(st.session_state.get(width_key, step))
    if width % step:
        lo, hi = RANGES["width"]
        st.session_state[width_key] = min(hi // step * step, max(step, lo, round(width / step) * step))


ADVANCED = [["timing_steps", "seed"], ["budget_mb", "device"], ["force"]]


def _reset(ns: str, base: ExperimentConfig) -> None:
    widget_state.set_values(ns, base.to_dict())


def config_widgets(ns: str, base: ExperimentConfig, url_base: ExperimentConfig | None = None) -> tuple[dict, dict]:
    """Renders the widgets; returns (raw values, each field's column, where its error message goes under it).
    Widgets start at `base`; the URL holds what differs from `url_base` (the full-size preset), so a link made
    on a CPU-sized page opens the same experiment on a GPU server too."""
    values, slots = {}, {}
    defaults = base.to_dict()
    url_defaults = (url_base or base).to_dict()

    def row(*fields):
        cols = st.columns(2)
        for i, field in enumerate(fields):
            values[field] = _widget(ns, field, defaults[field], cols[i])
            # The column itself, not an empty slot in it: a column takes an error written after the rows are drawn
            # just as well, and a page run sends one element fewer per field (the browser draws the result sooner).
            slots[field] = cols[i]
            urlstate.sync(widget_state.key(ns, field), values[field], url_defaults[field])

    # Drawn in order so that model and checkpoint (already returned) decide which fields follow;
    # a shared link with model=transformer therefore shows seq_len/heads on its very first run.
    row("model", "precision")
    row("layers", "width")
    row("batch", "accum")
    if values["model"] == "transformer":
        row("seq_len", "heads")
    elif values["model"] == "cnn":
        row("image_size")
    row("checkpoint")
    if values["checkpoint"] == "segments":
        row("segments")
    row("optimizer", "optimizer_impl")
    row("zero_grad_to_none", "inplace")
    row("steps")
    with st.expander(t("sandbox.advanced")):
        for fields in ADVANCED:
            row(*fields)
    for field in set(defaults) - set(values):
        urlstate.drop(widget_state.key(ns, field))  # hidden fields (seq_len for an MLP) leave the link
    return values, slots


def validate(base: ExperimentConfig, values: dict) -> tuple[ExperimentConfig | None, ConfigError | None]:
    return backend.config({**base.to_dict(), **values})


def explain(err: ConfigError, values: dict | None = None) -> str:
    """The engine's ConfigError in the learner's language: its rule code and values, worded by the app."""
    if err.code:
        text = t("config.err." + err.code, default="", **err.params)
        if text and err.code in ("range", "choice"):
            return f"{t('field.' + err.field, default=err.field)}: {text}"
        if text:
            return text
    return str(err)


def _show_error(ns: str, err: ConfigError, values: dict, slots: dict) -> None:
    slot = slots.get(err.field)
    target = slot.container() if slot is not None else st.container()
    target.error(t("config.invalid", message=explain(err, values)))
    batch, accum = values.get("batch"), values.get("accum")
    if err.field == "batch" and batch and accum and batch % accum:
        # Offer the nearest valid combinations instead of only saying no.
        batches = [b for b in options.LISTS["batch"] if b % accum == 0]
        nearest = sorted(batches, key=lambda b: abs(b - batch))[:2]
        accums = [a for a in options.LISTS["accum"] if batch % a == 0 and a < accum][-1:]
        cols = target.columns(len(nearest) + len(accums))
        for col, b in zip(cols, nearest, strict=False):
            col.button(
                t("config.use_batch", batch=b),
                key=f"{ns}.fix_b{b}",
                on_click=widget_state.set_values,
                args=(ns, {"batch": b}),
            )
        for col, a in zip(cols[len(nearest) :], accums, strict=False):
            col.button(
                t("config.use_accum", accum=a),
                key=f"{ns}.fix_a{a}",
                on_click=widget_state.set_values,
                args=(ns, {"accum": a}),
            )


def term_text(term: dict) -> str:
    """The estimator's explanation of one category (data from the engine), worded in the learner's language."""
    args = dict(term.get("args") or {})
    if "mib" in args:
        args["mib"] = f"{args['mib']:.1f}"
    if term["category"] == "activations":
        extra = t("term.activations.checkpointed") if args.pop("checkpointed", False) else ""
        return t("term.activations", **args) + extra
    return t("term." + term["category"], **args)


def show_time(cfg: ExperimentConfig, est: dict) -> None:
    """Step time and run duration before running: the replay's work over the worker's measured device rates."""
    predicted = backend.step_time(cfg, est)
    if predicted is None:
        return
    step, (low_s, high_s) = predicted["step"], predicted["run_s"]
    cols = st.columns(2)
    cols[0].metric(t("estimate.step_ms"), f"{step['low_ms']:,.3g}–{step['high_ms']:,.3g}")
    cols[1].metric(t("estimate.run_s"), f"{low_s:,.2g}–{high_s:,.2g}")
    st.caption(t("estimate.bound." + step["bound"]))


@st.fragment(run_every=1.0)
def _poll(ask) -> None:
    """While an estimate is computed elsewhere: every second, rerun the page once it is ready (never blocks)."""
    if not backend.pending(ask()):
        st.rerun()


def pending_estimate(err: str | None, ask) -> bool:
    """True (and "estimating" shown, the page polling) when err says the estimate is not ready; `ask()` asks again
    without waiting and returns its error."""
    if not backend.pending(err):
        return False
    st.caption(t("estimate.pending"))
    _poll(ask)
    return True


def show_estimate(cfg: ExperimentConfig) -> dict | None:
    capacity = backend.capacity_bytes(cfg)
    est, err = backend.estimate(cfg, capacity)
    if pending_estimate(err, lambda: backend.estimate(cfg, capacity, wait=0)[1]):
        return None
    if err:
        engine_error(err)
        return None
    peak = est["peak_bytes"]
    cols = st.columns(2)
    cols[0].metric(t("estimate.peak"), results.fmt_bytes(peak))
    if est.get("capacity_bytes"):
        cols[1].metric(t("estimate.capacity"), results.fmt_bytes(est["capacity_bytes"]))
    phase = str(est.get("peak_phase"))
    st.caption(t("estimate.peak_phase_is", phase=t("phase." + phase, default=phase)))
    if est.get("reserved_bytes"):
        st.caption(t("estimate.reserved", reserved=results.fmt_bytes(est["reserved_bytes"])))
    show_time(cfg, est)
    cap = backend.operator_cap_gib()
    if cap is not None and peak > cap * 2**30:  # the one verdict that decides: this server's limit per run
        st.warning(t("error.operator_cap", limit=f"{cap:g} GiB"))
    elif est.get("fits") is True:
        st.success(t("estimate.fits"))
    elif est.get("fits") is False:
        st.warning(t("estimate.no_fit"))
    else:
        st.caption(t("estimate.no_capacity"))
    if est.get("method") in ("replay", "replay_device"):
        st.caption(t("estimate.method.replay"))
    if est.get("unmeasured"):
        st.caption(t("estimate.not_predicted", n=len(est["unmeasured"])))
    elif est.get("signatures"):
        st.caption(t("estimate.workspaces_measured"))
    df = breakdown.frame(None, est.get("categories"))
    if not df.empty:
        layout.altair(breakdown.estimate_chart(df))
    terms = est.get("terms") or []
    if terms:
        with st.expander(t("estimate.terms")):
            st.markdown(
                "\n".join(
                    f"- **{t('cat.' + term['category'], default=term['category'])}** "
                    f"({results.fmt_bytes(term['bytes'])}): {term_text(term)}"
                    for term in terms
                )
            )
    return est


def _full_size_recording(size: sizing.Size, cfg: ExperimentConfig) -> dict | None:
    """On a CPU-sized page: the H200 recording of this configuration at full size, if the project has one."""
    k = size.scale
    if k <= 1:
        return None
    data = cfg.to_dict()
    if content.sized(dict(data, width=data["width"] * k, batch=data["batch"] * k), k) != data:
        return None
    full, err = backend.config(dict(data, width=data["width"] * k, batch=data["batch"] * k))
    return None if err else backend.find_recorded(full)


def render(ns: str, meta: dict, *, driver: bool = False) -> ExperimentConfig | None:
    """The whole sandbox of a lesson page; returns the valid current config (None if invalid)."""
    size = sizing.of(meta)
    base, preset_err = base_config(size)
    full, _ = base_config(size, full=True)
    with st.container(border=True):
        head, reset = st.columns([3, 1], vertical_alignment="center")
        head.subheader(t("sandbox.title"))
        reset.button(t("sandbox.reset"), key=f"{ns}.reset", on_click=_reset, args=(ns, base), width="stretch")
        if preset_err:
            st.warning(t("sandbox.bad_preset", message=preset_err))
        sizing.banner(size, ns)
        values, slots = config_widgets(ns, base, full)
        cfg, err = validate(base, values)
        if err:
            _show_error(ns, err, values, slots)
    if cfg is not None:
        with st.container(border=True):
            st.subheader(t("estimate.title"))
            show_estimate(cfg)
    if cfg is not None:
        recorded, label = backend.find_recorded(cfg), "sandbox.recorded"
        if not recorded:
            recorded, label = _full_size_recording(size, cfg), "sandbox.recorded_full"
        if recorded:
            name = (recorded.get("device") or {}).get("name", "GPU")
            title = t(label, name=name, k=size.scale)
            with layout.lazy_expander(title, key=f"{ns}.recorded_open", icon=":material/history:") as open_:
                if open_:
                    results.render_run(
                        recorded,
                        meta,
                        driver=driver,
                        recorded_at=recorded.get("started_at"),
                        key=f"{ns}.recorded",
                        ns=ns,
                    )
    ran = None if cfg is None else cfg.to_dict()
    specs = [{"label": t("sandbox.run_label"), "kind": "run", "params": ran}] if ran else []
    done = jobs.panel(ns, t("sandbox.run"), specs, tag=ran, disabled=not ran, explain=False)
    # Drawn empty before a result: the elements below keep their places in the page, so the browser keeps their
    # charts instead of building them again when a result appears above them.
    with st.container(key=f"{ns}-results"):
        if done:
            before = jobs.previous(ns)
            previous = before["statuses"][0].get("result") if before else None
            results.render_status(
                done["statuses"][0], meta, current=cfg, ran=done["tag"], driver=driver, key=ns, previous=previous
            )
    return cfg
