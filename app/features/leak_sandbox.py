"""The leak sandbox: pick scenarios, run each for N steps in the worker, chart allocated memory per step."""

from __future__ import annotations

import streamlit as st

from app import backend
from app.backend import CHOICES, RANGES
from app.charts import leak
from app.features import census_view
from app.i18n import lang, t
from app.ui import expect_view, jobs, layout, options, results, urlstate, widget_state
from course import catalog, content, expectations


def scenarios(lesson_id: str) -> dict[str, dict]:
    """id -> the scenario as lessons/leaks defines it (title, code, expect, expect_check)."""
    return {s["id"]: s for s in content.leak_scenarios(lesson_id)}


# A window of the engine's ranges: leak runs this size take seconds, and every scenario shows its growth.
BATCHES = options.powers_of_two("batch", 8, 512)
WIDTHS = options.powers_of_two("width", 64, 2048)
STEPS = RANGES["steps"]


def _parse_scenarios(raw, known) -> list[str]:
    values = [raw] if isinstance(raw, str) else list(raw)
    if not values or any(v not in known for v in values):
        raise ValueError(raw)
    return values


def _title(entry: dict) -> str:
    return content.localized(entry.get("title"), lang(), t("leak." + entry["id"], default=entry["id"]))


def render(lesson_id: str, meta: dict) -> None:
    # Its own namespace: the lesson's training sandbox sits on the same page with keys like <lesson>_batch.
    ns = f"{lesson_id}_leak"
    known = scenarios(lesson_id)
    titles = {s: _title(entry) for s, entry in known.items()}
    devices = {d: t(f"opt.device.{d}") for d in CHOICES["device"]}
    with st.container(border=True):
        st.subheader(t("leak.title"))
        defaults = {"scenarios": list(known)[:3], "steps": 10, "device": "auto", "batch": 64, "width": 512}
        parsers = {
            "scenarios": lambda raw: _parse_scenarios(raw, known),
            "steps": urlstate.number_in(*STEPS, whole=True),
            "device": urlstate.one_of(list(devices)),
            "batch": lambda raw: urlstate.one_of(BATCHES)(int(raw)),
            "width": lambda raw: urlstate.one_of(WIDTHS)(int(raw)),
        }
        for name, default in defaults.items():
            urlstate.init(f"{ns}_{name}", default, parsers[name])
        common = {"persist_state": "session"}
        # The picker names each scenario (its id); what it does is listed under it, where a sentence can wrap.
        chosen = st.multiselect(t("leak.scenarios"), list(known), key=f"{ns}_scenarios", **common)
        if chosen:
            st.caption("\n".join(f"- {titles[s]}" for s in chosen))
        cols = st.columns(2)
        steps = cols[0].slider(t("leak.steps"), *STEPS, key=f"{ns}_steps", **common)
        device = cols[1].selectbox(
            t("field.device"),
            list(devices),
            format_func=devices.__getitem__,
            key=widget_state.labelled(f"{ns}_device"),
            **common,
        )
        cols = st.columns(2)
        batch = cols[0].select_slider(t("field.batch"), BATCHES, key=f"{ns}_batch", **common)
        width = cols[1].select_slider(t("field.width"), WIDTHS, key=f"{ns}_width", **common)
        current = {"scenarios": chosen, "steps": steps, "device": device, "batch": batch, "width": width}
        for name, value in current.items():
            urlstate.sync(f"{ns}_{name}", value, defaults[name])
        for scenario in chosen:
            entry = known[scenario]
            with st.expander(_title(entry)):
                if entry.get("code"):
                    st.code(entry["code"], language="python")
                expect = expect_view.text(meta, entry.get("expect"))
                if expect:
                    st.markdown(f"**{t('leak.expect')}** {expect}")
        specs = [
            {
                "label": _title(known[s]),
                "kind": "leak",
                "scenario": s,
                "params": {"scenario": s, "steps": steps, "device": device, "batch": batch, "width": width},
            }
            for s in chosen
        ]
        done = jobs.panel(ns, t("leak.run"), specs, tag={"scenarios": chosen, "steps": steps}, disabled=not chosen)
    if done:
        show_results(done, meta, known, ns=ns)
    recorded(lesson_id, meta, known)


def recorded(lesson_id: str, meta: dict, known: dict) -> None:
    """Every leak scenario of this lesson recorded on a real GPU, in one chart."""
    loaded = []
    for scenario, entry in known.items():
        result, _ = backend.safe_load_recorded(catalog.leak_id(scenario))
        if result:
            loaded.append(({"label": _title(entry), "scenario": scenario}, {"state": "done", "result": result}))
    if not loaded:
        return
    name = (loaded[0][1]["result"].get("device") or {}).get("name", "GPU")
    with layout.lazy_expander(
        t("leak.recorded", name=name), key=f"{lesson_id}_leak.recorded_open", icon=":material/history:"
    ) as open_:
        if not open_:
            return
        show_results(
            {"specs": [s for s, _ in loaded], "statuses": [r for _, r in loaded]},
            meta,
            known,
            ns=f"{lesson_id}_leak.recorded",
        )


def show_results(done: dict, meta: dict, known: dict | None = None, ns: str = "leak") -> None:
    ok = results.successful(done)
    if not ok:
        return
    device = ok[0][1].get("device") or {}
    if device.get("type") == "cuda":
        st.caption(t("result.gpu", name=device.get("name", "GPU"), torch=device.get("torch_version", "?")))
    else:
        st.info(t("result.cpu", name=device.get("name", "CPU"), torch=device.get("torch_version", "?")))
    scenario_of = {spec["label"]: spec.get("scenario") for spec in done["specs"]}
    runs = {scenario_of[label]: r for label, r in ok if scenario_of.get(label)}
    st.markdown(f"##### {t('chart.leak')}")
    layout.chart(leak.chart(leak.frame(ok)), meta, "leak", runs, key=ns)
    verdicts = {}
    for label, result in ok:
        entry = (known or {}).get(scenario_of.get(label)) or {}
        verdicts[label] = expectations.verdict(expect_view.leak_checks(entry, result))
    # The scenario's title is long: a medium column keeps the growth and the verdict on a projector's screen.
    st.dataframe(
        leak.table(ok, verdicts),
        hide_index=True,
        width="stretch",
        column_config={t("col.scenario"): st.column_config.TextColumn(width="medium")},
    )
    census_view.render(ok, key=ns, names=scenario_of)  # which tensors the last step added, and who holds them
