"""DataFrames and Altair charts of data-parallel results (lesson 6): per rank, and per strategy on one axis."""

from __future__ import annotations

import altair as alt
import pandas as pd

from app.charts import CATEGORY_COLORS, HEIGHT, MIB_FMT
from app.frames import CATEGORIES, phase_label
from app.i18n import t

MIB = 2**20
COLORS = {**CATEGORY_COLORS, "communication": "#17becf"}
ORDER = CATEGORIES + ("communication",)


def ranks_frame(result: dict) -> pd.DataFrame:
    """One row per rank, phase and series (allocated, peak, and reserved where the device has it)."""
    accum = int((result.get("config") or {}).get("accum") or 1)
    rows = []
    for rank in result.get("ranks") or []:
        base = rank.get("baseline_bytes") or 0
        for i, p in enumerate(rank.get("phases") or []):
            for series in ("allocated", "peak", "reserved"):
                value = p.get(f"{series}_bytes")
                if value is not None:
                    rows.append({"order": i, "label": phase_label(p, accum), "series": t("series." + series),
                                 "rank": t("multigpu.rank", rank=rank["rank"]), "mib": (value - base) / MIB})
    return pd.DataFrame(rows, columns=["order", "label", "series", "rank", "mib"])


def ranks_chart(df: pd.DataFrame) -> alt.Chart:
    order = list(dict.fromkeys(df.sort_values("order")["label"]))
    axis = alt.Axis(labelAngle=-60, labelLimit=140, labelOverlap=False, labelFontSize=10)
    return alt.Chart(df).mark_line(point=True).encode(
        x=alt.X("label:N", sort=order, title=t("axis.phase"), axis=axis),
        y=alt.Y("mib:Q", title=t("axis.mib")),
        color=alt.Color("series:N", title=None, legend=alt.Legend(orient="top")),
        strokeDash=alt.StrokeDash("rank:N", title=None, legend=alt.Legend(orient="top")),
        tooltip=[alt.Tooltip("rank:N"), alt.Tooltip("label:N", title=t("axis.phase")),
                 alt.Tooltip("series:N", title=t("axis.series")),
                 alt.Tooltip("mib:Q", title=t("axis.mib"), format=MIB_FMT)],
    ).properties(height=HEIGHT)


def categories_frame(items: list[tuple[str, dict | None]]) -> pd.DataFrame:
    """(label, breakdown) pairs -> label, category, mib: one stacked bar per label."""
    rows = []
    for label, cats in items:
        for cat in ORDER:
            value = (cats or {}).get(cat)
            if value:
                rows.append({"label": label, "category": t("cat." + cat), "mib": value / MIB})
    return pd.DataFrame(rows, columns=["label", "category", "mib"])


def categories_chart(df: pd.DataFrame) -> alt.Chart:
    """Horizontal stacked bars on one shared axis (strategies or ranks), categories in fixed colours."""
    labels = list(dict.fromkeys(df["label"]))
    return alt.Chart(df).mark_bar().encode(
        y=alt.Y("label:N", sort=labels, title=None, axis=alt.Axis(labelLimit=220)),
        x=alt.X("sum(mib):Q", title=t("axis.mib"), stack="zero"),
        color=alt.Color("category:N", title=t("axis.category"),
                        scale=alt.Scale(domain=[t("cat." + c) for c in ORDER], range=[COLORS[c] for c in ORDER]),
                        legend=alt.Legend(orient="bottom", columns=1, labelLimit=400)),
        tooltip=[alt.Tooltip("label:N", title=t("col.strategy")), alt.Tooltip("category:N", title=t("axis.category")),
                 alt.Tooltip("mib:Q", title=t("axis.mib"), format=MIB_FMT)],
    ).properties(height=alt.Step(34))
