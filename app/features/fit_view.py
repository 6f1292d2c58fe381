"""'What would fit' per strategy: the largest batch under a memory budget by the estimate, confirmed by a real run."""

from __future__ import annotations

import streamlit as st

from app import backend
from app.backend import net_peak
from app.i18n import t
from app.ui import jobs, options, results
from course.fit import largest_fitting_batch
from course.units import MIB, fmt_bytes

NS = "compare.fit"


def _search(strategies, budget: int) -> list[dict]:
    out = []
    for sid, title, cfg in strategies:
        batch = largest_fitting_batch(cfg, budget, lambda c: backend.estimate(c, wait=None)[0])
        est = backend.estimate(cfg.replace(batch=batch), wait=None)[0] if batch else None
        out.append({"sid": sid, "title": title, "batch": batch, "peak": est["peak_bytes"] if est else None})
    return out


def render(strategies) -> None:
    """strategies: (id, title, config) of the compare page."""
    with st.container(border=True):
        st.subheader(t("fit.title"))
        st.caption(t("fit.explain"))
        lo, hi = options.budget_bounds()
        budget_mib = st.number_input(
            t("fit.budget"), min_value=int(lo), max_value=int(hi), value=256, step=64, key=f"{NS}.budget"
        )
        budget = int(budget_mib * MIB)
        if st.button(t("fit.search"), key=f"{NS}.search", width="stretch"):
            with st.spinner(t("fit.searching")):
                st.session_state[f"{NS}.found"] = {"budget": budget, "rows": _search(strategies, budget)}
        found = st.session_state.get(f"{NS}.found")
        if not found:
            return
        rows = found["rows"]
        st.dataframe(
            [
                {
                    t("col.strategy"): r["title"],
                    t("fit.batch"): r["batch"] or t("fit.none"),
                    t("compare.estimated_peak"): fmt_bytes(r["peak"]),
                }
                for r in rows
            ],
            hide_index=True,
            width="stretch",
        )
        fitting = [r for r in rows if r["batch"]]
        if not fitting:
            return
        best = max(fitting, key=lambda r: r["batch"])
        st.caption(t("fit.best", title=best["title"], batch=best["batch"], budget=fmt_bytes(found["budget"])))
        titles = {r["title"]: r for r in fitting}
        chosen = st.selectbox(t("fit.confirm_which"), list(titles), key=f"{NS}.which")
        row = titles[chosen]
        cfg = next(c for sid, _, c in strategies if sid == row["sid"]).replace(batch=row["batch"])
        spec = {"label": chosen, "kind": "run", "params": cfg.to_dict()}
        tag = {"budget": found["budget"], "batch": row["batch"]}
        done = jobs.panel(NS, t("fit.confirm"), [spec], tag=tag, primary=False, key=f"{NS}.confirm")
        if done:
            for label, result in results.successful(done):
                measured, limit = net_peak(result), done["tag"]["budget"]
                text = t(
                    "fit.measured",
                    title=label,
                    batch=done["tag"]["batch"],
                    peak=fmt_bytes(measured),
                    budget=fmt_bytes(limit),
                )
                (st.success if measured is not None and measured <= limit else st.warning)(text)
