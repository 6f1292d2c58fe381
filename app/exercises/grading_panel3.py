"""Exercise 3's graded panel: pick the fixes for the leaky loop, run it next to the course's loop, and see whether
its memory curve is flat and its gradients are right."""

from __future__ import annotations

import streamlit as st

from app import backend
from app.charts import leak
from app.exercises import grading_view
from app.features import census_view
from app.i18n import t
from app.ui import jobs, layout, results, urlstate
from app.ui.errors import engine_error
from course.grading import ex3
from course.units import fmt_bytes

NS = "ex3g"


def _key(fix: str) -> str:
    return f"{NS}_{fix}"


def render(meta: dict) -> None:
    slot = st.empty()
    try:
        s = ex3.settings(meta)
    except ValueError as exc:  # the exercise's settings break a rule: said, the page goes on
        engine_error(str(exc))
        return
    tolerance = backend.gradient_tolerance("fp32")
    with st.container(border=True):
        st.subheader(t("ex3.title"))
        st.markdown(t("ex3.intro", steps=s.steps))
        fixes = []
        for fix in s.fixes:
            urlstate.init(_key(fix), False, urlstate.on_off)
            if st.checkbox(t("ex3.fix." + fix), key=_key(fix)):
                fixes.append(fix)
            urlstate.sync(_key(fix), st.session_state[_key(fix)], False)
        errors = ex3.validate(s, fixes)
        if errors:
            st.error(grading_view.say_all(errors))
        loop = ex3.loop_of(s, fixes)
        st.markdown(f"**{t('ex3.your_loop')}**")
        st.code(ex3.code(loop), language="python")
        output = s.batch * s.width * 4
        st.caption(
            t(
                "ex3.rule",
                share=f"{s.flat_share * 100:.0f}",
                output=fmt_bytes(output),
                limit=fmt_bytes(s.flat_share * output),
                tol=f"{tolerance:.0e}",
                batch=s.batch,
                width=s.width,
            )
        )
        done = jobs.panel(NS, t("ex3.run"), lambda: _group(s, fixes, loop), disabled=bool(errors))
    if done:
        _show(s, meta, done, tolerance)
    grading_view.show_progress(meta["id"], slot, s.total)


def _group(s: ex3.Settings, fixes, loop: dict) -> tuple[list, dict]:
    """The learner's loop and the course's, run side by side."""
    params = {
        "scenario": "exercise_loop",
        "steps": s.steps,
        "device": "auto",
        "batch": s.batch,
        "width": s.width,
        "layers": s.layers,
    }
    specs = [
        {"label": t("ex3.label.yours"), "kind": "leak", "params": dict(params, loop=loop)},
        {"label": t("ex3.label.course"), "kind": "leak", "params": dict(params, loop={})},
    ]
    return specs, {"fixes": fixes, "loop": loop}


def _show(s: ex3.Settings, meta: dict, done: dict, tolerance: float) -> None:
    ok = results.successful(done)
    mine = next((r for label, r in ok if label == done["specs"][0]["label"]), None)
    if mine is None:
        return
    v = ex3.verdict(s, mine, tolerance)
    grading_view.record(meta["id"], v["passed"], s.total)
    st.divider()
    st.subheader(t("ex3.solved") if v["solved"] else t("ex3.not_yet"))
    results.device_label(mine)
    grading_view.check_line(
        v["flat"],
        t(
            "ex3.check.flat" if v["flat"] else "ex3.check.grows",
            growth=fmt_bytes(v["growth"]),
            limit=fmt_bytes(v["limit"]),
        ),
    )
    error = v["gradient_error"]
    grading_view.check_line(
        v["grads_ok"],
        t(
            "ex3.check.grads" if v["grads_ok"] else "ex3.check.grads_wrong",
            error=f"{error:.2e}" if error is not None else "—",
            tol=f"{tolerance:.0e}",
        ),
    )
    if v["why"]:
        st.markdown(grading_view.say_all(v["why"]))
    st.markdown(f"##### {t('chart.leak')}")
    layout.altair(leak.chart(leak.frame(ok)))
    st.dataframe(leak.table(ok), hide_index=True, width="stretch")
    census_view.render(ok, key=NS)
