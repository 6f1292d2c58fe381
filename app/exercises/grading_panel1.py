"""Exercise 1's graded panel: predict what is alive at the peak, run it for real, get each prediction graded."""

from __future__ import annotations

import streamlit as st

from app import backend
from app.backend import CHOICES, PHASES, RANGES
from app.charts import breakdown
from app.exercises import grading_view
from app.i18n import t
from app.ui import jobs, layout, options, results, sandbox, sizing, urlstate, widget_state
from app.ui.errors import engine_error
from course.grading import ex1
from course.units import fmt_bytes

NS = "ex1g"  # its own namespace: the free sandbox of this page uses exercise1_*


def _key(name: str) -> str:
    return f"{NS}_{name}"


def _parse_mib(raw, s: ex1.Settings):
    if str(raw).lower() in ("", "none"):
        return None
    value = float(raw)
    if not 0 <= value <= s.max_mib:
        raise ValueError(raw)
    return value


def _config_widgets(s: ex1.Settings, base: dict) -> dict:
    values = {}
    cols = [col for _ in range(0, len(s.fields), 2) for col in st.columns(2)]
    for i, field in enumerate(s.fields):
        k = _key(field)
        urlstate.init(k, base[field], lambda raw, f=field: backend.field_value(f, raw))
        label = t("field." + field)
        if field in CHOICES:
            allowed = backend.SANDBOX_OPTIMIZERS if field == "optimizer" else CHOICES[field]
            labels = {v: t(f"opt.{field}.{v}", default=str(v)) for v in allowed}
            values[field] = cols[i].selectbox(
                label,
                list(allowed),
                format_func=labels.__getitem__,
                key=widget_state.labelled(k),
                persist_state="session",
                on_change="ignore",
            )
        elif field == "width":  # picked from the sandbox's widths; counts (layers, batch) are typed in
            widths = sorted(set(options.LISTS[field]) | {st.session_state[k]})
            values[field] = cols[i].selectbox(label, widths, key=k, persist_state="session", on_change="ignore")
        else:
            lo, hi = RANGES[field]
            values[field] = cols[i].number_input(
                label, min_value=lo, max_value=hi, step=1, key=k, persist_state="session", on_change="ignore"
            )
    return values


def _prediction_widgets(s: ex1.Settings) -> dict:
    preds = {}
    cols = st.columns(2)
    for i, cat in enumerate(s.categories):
        k = _key(f"p_{cat}")
        urlstate.init(k, None, lambda raw: _parse_mib(raw, s))
        preds[cat] = cols[i % 2].number_input(
            t("ex1.predict", category=t("cat." + cat)),
            min_value=0.0,
            max_value=s.max_mib,
            step=1.0,
            format="%.1f",
            placeholder=t("ex1.placeholder"),
            key=k,
            persist_state="session",
            on_change="ignore",
        )
    k = _key("p_phase")
    urlstate.init(k, None, urlstate.one_of(PHASES))
    labels = {p: t("phase." + p) for p in PHASES}
    preds["phase"] = st.selectbox(
        t("ex1.predict_phase"),
        list(PHASES),
        format_func=labels.__getitem__,
        index=None,
        placeholder=t("ex1.choose"),
        key=widget_state.labelled(k),
        persist_state="session",
        on_change="ignore",
    )
    return preds


def render(meta: dict) -> None:
    slot = st.empty()
    try:
        s = ex1.settings(meta)
    except ValueError as exc:  # the exercise's settings break a rule: said, the page goes on
        engine_error(str(exc))
        return
    size = sizing.of(meta)
    base_cfg, _ = sandbox.base_config(size)
    base = base_cfg.to_dict()
    # Not a form: a form's values reach the server only when it is submitted, so a language switch (a rerun) before
    # that drew every choice back at its last submitted value. Widgets that send their value with the next rerun
    # instead of starting one ("ignore") keep the form's one-click feel.
    with st.container(border=True):
        st.subheader(t("ex1.title"))
        st.markdown(t("ex1.intro"))
        if size.active:
            full_cfg, _ = sandbox.base_config(size, full=True)
            st.info(t("ex1.scaled", **ex1.sized_words(full_cfg, base_cfg, size.scale)), icon=":material/straighten:")
        config = _config_widgets(s, base)
        st.markdown(f"**{t('ex1.predictions')}**")
        preds = _prediction_widgets(s)
        st.caption(
            t(
                "ex1.tolerance",
                pct=f"{s.tolerance * 100:.0f}",
                floor=fmt_bytes(s.floor_bytes),
                tie=f"{s.tie_share * 100:.0f}",
            )
        )
        done = jobs.panel(NS, t("ex1.run"), lambda: _group(s, base_cfg, config, preds))
    for field, value in config.items():
        urlstate.sync(_key(field), value, base[field])
    for name, value in preds.items():
        urlstate.sync(_key(f"p_{name}"), value, None)
    if done:
        _show(s, done, meta)
    grading_view.show_progress(meta["id"], slot, s.total)


def _group(s: ex1.Settings, base_cfg, config: dict, preds: dict) -> tuple[list, dict] | None:
    """The run to grade the predictions against, or None with what to fix first."""
    errors = ex1.validate(s, preds)
    if errors:
        st.error(t("ex1.fix_first") + "\n" + grading_view.say_all(errors))
        return None
    cfg, err = sandbox.validate(base_cfg, config)
    if err:
        st.error(t("config.invalid", message=sandbox.explain(err, config)))
        return None
    specs = [{"label": t("ex1.run_label"), "kind": "run", "params": cfg.to_dict()}]
    return specs, {"predictions": dict(preds), "config": cfg.to_dict()}


def _line(item: dict) -> str:
    """One prediction's grade as a line that wraps in a narrow column (a wide table would be cut off)."""
    field = item["field"]
    if field == "phase":

        def name(p):
            return t("phase." + p, default=str(p)) if p else "—"

        predicted, measured, estimated = name(item["predicted"]), name(item["measured"]), name(item["estimated"])
        if item.get("tied"):
            measured += " (" + t("ex1.tie", phases=", ".join(name(p) for p in item["tied"])) + ")"
        tolerance = t("ex1.exact")
    else:
        predicted, measured, estimated = item["predicted"], item["measured"], item["estimated"]
        tolerance = f"± {item['tolerance']}"
    mark = ":green[✓]" if item["ok"] else ":red[✗]"
    return f"- {mark} **{t('ex1.field.' + field)}** — " + t(
        "ex1.line", yours=predicted, measured=measured, estimated=estimated, tolerance=tolerance
    )


def _show(s: ex1.Settings, done: dict, meta: dict) -> None:
    status = done["statuses"][0]
    result = status.get("result")
    if status.get("state") != "done" or not result or result.get("oom"):
        results.render_status(status, meta, current=None, ran=done["tag"]["config"], key=NS)
        return
    g = ex1.grade(s, done["tag"]["predictions"], result, result.get("estimate"))
    grading_view.record(meta["id"], g["correct"], s.total)
    st.divider()
    st.subheader(t("ex1.grade_title", correct=g["correct"], total=g["total"]))
    results.device_label(result)
    st.caption(
        t(
            "ex1.config_ran",
            layers=result["config"]["layers"],
            width=result["config"]["width"],
            batch=result["config"]["batch"],
            optimizer=t("opt.optimizer." + result["config"]["optimizer"]),
            impl=t("opt.optimizer_impl." + result["config"]["optimizer_impl"]),
        )
    )
    st.markdown("\n".join(_line(item) for item in g["items"]))
    if g["solved"]:
        st.success(t("ex1.all_right"))
    for item in g["items"]:
        if not item["ok"]:
            st.markdown(f"**{t('ex1.field.' + item['field'])}** — " + t("ex1.miss"))
            st.markdown(grading_view.say_all(item["why"]))
    with st.expander(t("ex1.explain_hits")):
        for item in g["items"]:
            if item["ok"]:
                st.markdown(f"**{t('ex1.field.' + item['field'])}**\n" + grading_view.say_all(item["why"]))
    bdf = breakdown.frame(result.get("breakdown"), (result.get("estimate") or {}).get("categories"))
    if not bdf.empty:
        st.markdown(f"##### {t('chart.breakdown')}")
        layout.altair(breakdown.chart(bdf))
