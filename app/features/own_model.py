"""The "Your model" page's parts: the lesson with its numbers from the recorded replays, what to notice (each sentence
checked against the table it sits under), the model picker (names and numbers only), the estimate, what fits and a
real run beside its estimate."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app import backend
from app.charts import breakdown, fits
from app.i18n import lang, t
from app.ui import jobs, layout, results
from app.ui.errors import engine_error
from course import content, facts
from course import own_model as om
from course.units import GIB, fmt_bytes

NS = "ym"
OVERRIDES = ("layers", "hidden", "heads", "kv_heads", "experts")
HF_DEFAULTS = {"batch": 1, "seq_len": 512, "precision": "bf16", "optimizer": "adamw", "optimizer_impl": "fused"}
TV_DEFAULTS = {"batch": 32, "image_size": 224, "precision": "amp_bf16", "optimizer": "adamw", "optimizer_impl": "fused"}


def page(lesson_id: str):
    """Title, the lesson (its {{facts}} from the recorded replays) on the left; returns (meta, right)."""
    meta = layout.lesson_meta(lesson_id)
    layout.header(lesson_id, meta)
    left, right = layout.columns()
    with left:
        text, _used = content.read_text(lesson_id, "lesson", lang())
        st.markdown(facts.render(text or "", om.facts(meta)))
    return meta, right


def recorded(meta: dict) -> None:
    st.subheader(t("ym.recorded"))
    rows = pd.DataFrame(om.table_rows())
    st.dataframe(rows.rename(columns={c: t("ym.col." + c) for c in rows.columns}), hide_index=True)
    st.caption(t("ym.recorded_caption"))
    values, verdicts = om.facts(meta), om.verdicts(meta)
    with st.container(border=True):
        st.markdown(f"**{t('ym.notice')}**")
        for check in meta.get("checks", []):
            states = [verdicts[name] for name in check["facts"]]
            # Material icons: headless browsers and some servers have no emoji font.
            mark = (
                ":material/check_circle:"
                if all(states)
                else (":material/hourglass_empty:" if None in states else ":material/warning:")
            )
            verdict = t("ym.holds") if all(states) else (t("ym.awaiting") if None in states else t("ym.fails"))
            st.markdown(f"{mark} {facts.render(content.localized(check['text'], lang()), values)} *({verdict})*")


def picker(meta: dict):
    """The configuration the learner picked (an ExperimentConfig), or None after showing why it is not valid."""
    st.subheader(t("ym.pick"))
    presets = om.presets()
    # Labels resolved now: a format_func called later (AppTest does) must not re-read the language.
    kinds = {k: t("ym.source." + k) for k in ("preset", "hf", "torchvision")}
    kind = st.radio(t("ym.source"), tuple(kinds), format_func=kinds.__getitem__, horizontal=True, key=f"{NS}.kind")
    if kind == "preset":
        ids = list(presets)
        pid = st.selectbox(
            t("ym.preset"),
            ids,
            index=ids.index(meta["default_preset"]),
            key=f"{NS}.preset",
            format_func={p: content.localized(presets[p]["title"], lang()) for p in ids}.__getitem__,
        )
        size = st.radio(
            t("ym.size"),
            ("full", "tiny"),
            format_func={s: t("ym.size." + s) for s in ("full", "tiny")}.__getitem__,
            horizontal=True,
            key=f"{NS}.size",
        )
        source = f"preset:{pid}" + (":tiny" if size == "tiny" else "")
        defaults, task = om.defaults(source), presets[pid]["source"].get("task")
    elif kind == "hf":
        source = "hf:" + st.text_input(t("ym.model_type"), "qwen2", key=f"{NS}.model_type").strip()
        defaults, task = HF_DEFAULTS, None
    else:
        ok, why = backend.torchvision_status()
        if not ok:
            st.info(t("ym.torchvision_missing", why=why))
            return None
        source = "torchvision:" + st.text_input(t("ym.torchvision"), "resnet18", key=f"{NS}.tv").strip()
        defaults, task = TV_DEFAULTS, "image_classification"
    with st.expander(t("ym.overrides")):
        cols = st.columns(len(OVERRIDES))
        chosen = {
            k: cols[i].number_input(t("ym.override." + k), 0, 32768, 0, key=f"{NS}.o.{k}.{source}")
            for i, k in enumerate(OVERRIDES)
        }
    st.markdown(f"**{t('ym.levers')}**")
    c = st.columns(3)
    data = {"model_source": source, "model_overrides": ",".join(f"{k}={v}" for k, v in chosen.items() if v)}
    for i, (name, options) in enumerate(
        (
            ("precision", backend.CHOICES["precision"]),
            ("optimizer", backend.CHOICES["optimizer"]),
            ("optimizer_impl", backend.CHOICES["optimizer_impl"]),
        )
    ):
        value = defaults.get(name, options[0])
        data[name] = c[i].selectbox(
            t("field." + name), options, index=options.index(value), key=f"{NS}.{name}.{source}"
        )
    data["checkpoint"] = c[0].selectbox(t("field.checkpoint"), ("none", "per_layer"), key=f"{NS}.ck.{source}")
    data["batch"] = c[1].number_input(
        t("field.batch"), 1, 65536, int(defaults.get("batch", 1)), key=f"{NS}.batch.{source}"
    )
    size_field = "image_size" if task == "image_classification" else "seq_len"
    lo, hi = backend.RANGES[size_field]
    data[size_field] = c[2].number_input(
        t("field." + size_field), lo, hi, int(defaults.get(size_field, 512)), key=f"{NS}.{size_field}.{source}"
    )
    data.update(steps=2, timing_steps=0)
    cfg, err = backend.config(data)
    if err is not None:
        st.error(str(err))
    return cfg


def estimate(cfg) -> None:
    """On a click (a full-size replay takes seconds); shown while the configuration stays the same."""
    st.subheader(t("ym.estimate"))
    if st.button(t("ym.estimate"), key=f"{NS}.estimate", type="primary"):
        with st.spinner(t("ym.estimating")):
            # For a GPU whatever this server has: the question is whether it fits the learner's card.
            # The replay runs in the server's estimate processes; this click waits for it (bounded there).
            st.session_state[f"{NS}.est"] = (cfg.to_dict(), *backend.estimate(cfg, for_device="cuda", wait=None))
    shown = st.session_state.get(f"{NS}.est")
    if not shown or shown[0] != cfg.to_dict():
        return
    _, est, err = shown
    if err:
        (st.warning if "cannot be predicted" in err else engine_error)(err.split(": ", 1)[-1])
        return
    show_estimate(est)


def show_estimate(est: dict) -> None:
    p = est["peak_phase"]
    phase = p if isinstance(p, str) else p["phase"]
    device = t("source.estimated") + f" ({est.get('device_type', 'cuda').upper()})"
    st.markdown(t("ym.estimate_result", peak=fmt_bytes(est["peak_bytes"]), phase=t("phase." + phase), device=device))
    layout.altair(breakdown.estimate_chart(breakdown.frame(None, est["categories"])))


def what_fits(meta: dict, cfg) -> None:
    st.subheader(t("ym.fits"))
    cap = st.number_input(t("ym.capacity"), 0.001, 100000.0, float(meta["capacity_gib"]), key=f"{NS}.capacity")
    if not st.button(t("ym.fits_search"), key=f"{NS}.fits"):
        return
    with st.spinner(t("ym.fits_searching")):
        res, err = backend.what_fits(cfg, int(cap * GIB), wait=None)
    if err:
        engine_error(err)
        return
    show_fits(res)


def show_fits(res: dict) -> None:
    df = fits.frame(res)
    st.dataframe(df, hide_index=True)
    layout.altair(fits.chart(df))
    c = res["cheapest"]
    if c is None:
        st.warning(t("ym.fits_none", batch=res["batch"]))
    else:
        st.success(
            t(
                "ym.fits_cheapest",
                batch=res["batch"],
                precision=c["precision"],
                impl=c["optimizer_impl"],
                checkpoint=c["checkpoint"],
                accum=c["accum"],
                peak=fmt_bytes(c["peak_bytes"]),
            )
        )


def run(cfg) -> None:
    st.subheader(t("ym.run"))
    cpu = backend.device_type(cfg) == "cpu"
    if cpu and not cfg.model_source.endswith(":tiny"):
        st.caption(t("ym.run_cpu_tiny"))
    label = t("ym.run_label", model=cfg.model_source) + (" · CPU" if cpu else "")
    if st.button(t("ym.run"), key=f"{NS}.run", disabled=cpu and not cfg.model_source.endswith(":tiny")):
        jobs.start(NS, [{"label": label, "kind": "run", "params": cfg.to_dict()}], tag=cfg.to_dict())
    jobs.poll(NS)
    done = jobs.finished(NS)
    for _label, result in results.successful(done) if done else []:
        show_run(result)


def show_run(result: dict) -> None:
    measured, est = backend.net_peak(result), result["estimate"]["peak_bytes"]
    st.markdown(
        t("ym.run_result", measured=fmt_bytes(measured), device=result["device"]["type"], estimate=fmt_bytes(est))
    )
    same = measured == est
    (st.success if same else st.info)(
        t("ym.run_equal") if same else t("ym.run_differs", diff=fmt_bytes(abs(measured - est)))
    )
    layout.altair(breakdown.chart(breakdown.frame(result["breakdown"], result["estimate"]["categories"])))
