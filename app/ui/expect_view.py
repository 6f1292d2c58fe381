"""Lesson prompts that check themselves: a "what to notice" is shown as written only when the run on the page
bears it out; otherwise the page says what this run shows instead. Numbers in prose come from recorded facts."""

from __future__ import annotations

import streamlit as st

from app import backend
from app.i18n import lang, t
from app.ui import sizing, widget_state
from course import content, expectations, facts
from course.experiment import NOT_THE_EXPERIMENT, same_experiment
from course.units import fmt_bytes


def page_facts(meta: dict) -> dict[str, str]:
    return backend.fact_values(meta.get("facts"))


def text(meta: dict, value, default: str = "", kind: str | None = None) -> str:
    """A localized lesson string with its {{fact}} placeholders filled from the recorded results, and a prompt's
    {{preset.<field>}} / {{try.<field>}} from the runs it talks about at this page's size (app/ui/sizing.py)."""
    raw = content.localized(value, lang(), default)
    if not raw:
        return raw
    values = page_facts(meta)
    if "{{preset." in raw or "{{try." in raw:
        values = {**values, **sizing.of(meta).words(kind)}
    return facts.render(raw, values)


def _phase(name) -> str:
    return t("phase." + str(name), default=str(name))


def _category(name) -> str:
    names = [name] if isinstance(name, str) else list(name)
    return " + ".join(t("cat." + n, default=n) for n in names)


def _range(spec: dict, scale: float = 1.0, unit: str = "") -> str:
    lo, hi = spec.get("min"), spec.get("max")

    def f(v):
        return f"{v * scale:.3g}{unit}"

    if lo is not None and hi is not None:
        return f"{f(lo)} – {f(hi)}"
    return f"≥ {f(lo)}" if lo is not None else f"≤ {f(hi)}"


def describe(outcome: dict) -> str:
    """One sentence: what this run shows where the lesson's note expected something else."""
    spec, actual, kind = outcome["spec"], outcome["actual"], outcome["check"]
    if kind == "peak_phase":
        largest = outcome.get("largest")
        where = (
            t("expect.largest", category=t("cat." + largest[0], default=largest[0]), size=fmt_bytes(largest[1]))
            if largest
            else ""
        )
        return (
            t(
                "expect.peak_phase",
                actual=_phase(actual),
                step=outcome.get("step") or "?",
                expected=" / ".join(_phase(p) for p in spec["is"]),
            )
            + where
        )
    if kind == "share":
        return t(
            "expect.share",
            category=_category(spec["category"]),
            actual=f"{actual * 100:.1f} %",
            expected=_range(spec, 100, " %"),
        )
    if kind == "largest_category":
        return t("expect.largest_category", actual=_category(actual), expected=" / ".join(map(_category, spec["is"])))
    if kind == "breakdown_sums_to_peak":
        return t("expect.breakdown_sum", actual=f"{actual:.3g}")
    if kind == "phase_growth":
        return t(
            "expect.phase_growth",
            step=spec["step"],
            phase=_phase(spec["phase"]),
            actual=f"{actual:.2f}×",
            expected=_range(spec, 1, "×"),
        )
    if kind == "step1_le_steady":
        return t("expect.step1", first=fmt_bytes(actual), steady=fmt_bytes(outcome.get("steady")))
    if kind == "steady_repeats":
        return t("expect.steady_repeats")
    if kind == "reserved_ge_allocated":
        return t("expect.reserved")
    if kind == "leak_growth":
        return t(
            "expect.leak_growth",
            bytes=fmt_bytes(outcome.get("growth_bytes")),
            actual=f"{actual:.3g}×",
            expected=_range(spec, 1, "×"),
        )
    if kind == "paired_verdict":

        def name(v):
            return t("verdict_name." + str(v), default=str(v))

        return t("expect.paired_verdict", actual=name(actual), expected=" / ".join(name(v) for v in spec["is"]))
    metric = spec["metric"]
    return t(
        "expect.value",
        metric=t("metric_name." + metric, default=metric),
        actual=f"{actual:.3g}" if isinstance(actual, (int, float)) else str(actual),
        expected=_range(spec),
    )


def config_changes(meta: dict, config: dict | None) -> list[str]:
    """'field: preset → this run' for every field in which the shown run differs from the lesson's preset."""
    if not config:
        return []
    cfg, err = backend.config(sizing.of(meta).over_preset())
    if err:
        return []
    preset = cfg.to_dict()
    return [
        f"{t('field.' + k, default=k)}: {preset[k]} → {v}"
        for k, v in config.items()
        if k in preset and k not in NOT_THE_EXPERIMENT and preset[k] != v
    ]


def notice(meta: dict, kind: str, runs: dict | None, entry: dict | None = None) -> None:
    """`entry`: a prompt that is not under meta["prompts"] (a fragmentation pattern carries its own)."""
    entry = entry if entry is not None else (meta.get("prompts") or {}).get(kind) or {}
    note = text(meta, entry.get("notice"), kind=kind) or t(f"prompt.{kind}.notice")
    outcomes = expectations.evaluate(entry.get("expect") or [], runs) if runs else []
    ok = expectations.verdict(outcomes)
    if ok is False:
        lines = [f"- {describe(o)}" for o in outcomes if o["holds"] is False]
        st.markdown(f"**{t('prompt.notice')}** {t('expect.differs')}\n" + "\n".join(lines))
        changes = config_changes(meta, (runs.get("run") or {}).get("config"))
        if changes:
            st.caption(t("expect.because_config", changes="; ".join(changes)))
        else:
            st.caption(t("expect.because_device"))
        with st.expander(t("expect.preset_note")):
            st.markdown(note)
        return
    st.markdown(f"**{t('prompt.notice')}** {note}")
    if ok:
        st.caption(t("expect.checked"))


def checked(checks: list[dict] | None, runs: dict) -> bool | None:
    """Under a text that is not a prompt (a technique's explanation, a bullet about a table): says what the runs
    it is shown with contradict, or that they bear it out."""
    outcomes = expectations.evaluate(checks or [], runs)
    ok = expectations.verdict(outcomes)
    if ok is False:
        st.warning(
            t("expect.text_differs") + "\n" + "\n".join(f"- {describe(o)}" for o in outcomes if o["holds"] is False)
        )
    elif ok:
        st.caption(t("expect.checked"))
    return ok


def try_this(
    meta: dict, kind: str, runs: dict | None, ns: str | None, previous: dict | None, key: str | None = None
) -> None:
    entry = (meta.get("prompts") or {}).get(kind) or {}
    st.markdown(f"**{t('prompt.try')}** {text(meta, entry.get('try'), kind=kind) or t(f'prompt.{kind}.try')}")
    change = sizing.of(meta).change(entry.get("try_change"))
    current = (runs or {}).get("run")
    if change and previous and current and previous.get("config") and current.get("config"):
        predicted = {**previous["config"], **change}
        if same_experiment(predicted, current["config"]) and not same_experiment(previous["config"], current["config"]):
            outcomes = expectations.evaluate(entry.get("try_expect") or [], {"run": previous, "changed": current})
            ok = expectations.verdict(outcomes)
            if ok:
                st.success(t("expect.try_held"))
            elif ok is False:
                st.warning(
                    t("expect.try_differs")
                    + "\n"
                    + "\n".join(f"- {describe(o)}" for o in outcomes if o["holds"] is False)
                )
    if change and ns:
        st.button(
            t("expect.apply", changes=", ".join(f"{t('field.' + k, default=k)} = {v}" for k, v in change.items())),
            key=f"{key or ns}.apply.{kind}",
            on_click=widget_state.set_values,
            args=(ns, change),
            icon=":material/science:",
        )


def render(
    meta: dict,
    kind: str,
    runs: dict | None = None,
    ns: str | None = None,
    previous: dict | None = None,
    key: str | None = None,
) -> None:
    """`runs` are the results the chart shows; `ns` is the sandbox an Apply button sets; `previous` the run before."""
    notice(meta, kind, runs)
    try_this(meta, kind, runs, ns, previous, key)


def leak_checks(scenario: dict, result: dict) -> list[dict]:
    return expectations.evaluate(scenario.get("expect_check") or [], {"run": result})
