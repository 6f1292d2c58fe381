"""Step times of several strategies measured in interleaved, repeated rounds (experiments/timing.py)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app import charts, content, frames, layout, results
from app.i18n import lang, t
from experiments.metrics import rounds_distinguishable as distinguishable


def titles(meta: dict) -> dict[str, str]:
    return {s["id"]: content.localized(s.get("title"), lang(), s["id"]) for s in meta.get("strategies") or []}


def show(result: dict, meta: dict, key: str) -> None:
    names = titles(meta)
    results.device_label(result, result.get("started_at"))
    st.caption(t("rounds.explain", steps=result.get("steps"), rounds=result.get("rounds")))
    df = frames.rounds_frame(result, names)
    if df.empty:
        return
    layout.chart(charts.rounds_chart(df), meta, "rounds", {"rounds": result}, key=key)
    rows = result.get("strategies") or []
    first = rows[0]
    table = [{t("col.strategy"): names.get(r["id"], r["id"]),
              t("rounds.col.median"): round(r["median_ms"], 3),
              t("rounds.col.range"): f"{r['min_ms']:.3f} – {r['max_ms']:.3f}",
              t("rounds.col.ratio"): f"{r['median_ms'] / first['median_ms']:.2f}×"} for r in rows]
    st.dataframe(pd.DataFrame(table), hide_index=True, width="stretch")
    for r in rows[1:]:
        a, b = names.get(first["id"], first["id"]), names.get(r["id"], r["id"])
        st.markdown("- " + t("rounds.distinct" if distinguishable(first, r) else "rounds.same", a=a, b=b))
