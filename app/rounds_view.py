"""Step times of several strategies measured in interleaved, repeated rounds (experiments/timing.py)."""

from __future__ import annotations

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
    # Lines, not a table: they wrap in a half-width column on a projector, where a table hides its numbers.
    for r in rows:
        name = names.get(r["id"], r["id"])
        st.markdown("- " + t("rounds.line", name=name, median=f"{r['median_ms']:.3f}", lo=f"{r['min_ms']:.3f}",
                             hi=f"{r['max_ms']:.3f}", ratio=f"{r['median_ms'] / first['median_ms']:.2f}"))
    for r in rows[1:]:
        a, b = names.get(first["id"], first["id"]), names.get(r["id"], r["id"])
        st.markdown("- " + t("rounds.distinct" if distinguishable(first, r) else "rounds.same", a=a, b=b))
