"""Memory by category at the peak, measured beside estimated (one stacked bar per source), and the estimate alone
before a run (one bar per category), in the categories' fixed colours."""

from __future__ import annotations

import altair as alt
import pandas as pd

from app.backend import CATEGORIES
from app.charts.common import CATEGORY_COLORS, HEIGHT, MIB_FMT, Section, short_legend
from app.i18n import t
from course.units import MIB


def frame(measured: dict | None, estimated: dict | None) -> pd.DataFrame:
    rows = []
    for source, cats in (("measured", measured), ("estimated", estimated)):
        for cat in CATEGORIES:
            value = (cats or {}).get(cat)
            if value:
                rows.append({"source": t("source." + source), "category": t("cat." + cat), "mib": value / MIB})
        for cat, value in (cats or {}).items():
            if cat not in CATEGORIES and value:
                rows.append({"source": t("source." + source), "category": cat, "mib": value / MIB})
    return pd.DataFrame(rows, columns=["source", "category", "mib"])


def chart(df: pd.DataFrame) -> alt.Chart:
    """df from `frame`: source, category, mib (stacked per source)."""
    names = [t("cat." + c) for c in CATEGORY_COLORS]
    return (
        alt.Chart(df)
        .mark_bar()
        .encode(
            x=alt.X("source:N", title=None, axis=alt.Axis(labelAngle=0)),
            y=alt.Y("sum(mib):Q", title=t("axis.mib"), stack="zero"),
            color=alt.Color(
                "category:N",
                title=t("axis.category"),
                scale=alt.Scale(domain=names, range=list(CATEGORY_COLORS.values())),
                # Below the bars: beside them it takes the whole width of a half-screen column.
                legend=short_legend(),
            ),
            order=alt.Order("category:N"),
            tooltip=[
                alt.Tooltip("source:N", title=t("axis.source")),
                alt.Tooltip("category:N", title=t("axis.category")),
                alt.Tooltip("mib:Q", title=t("axis.mib"), format=MIB_FMT),
            ],
        )
        .properties(height=HEIGHT + 200)  # the legend, one row per category, shares the chart's height
    )


def section(result: dict) -> Section | None:
    """A result's categories at its peak beside its estimate's, or None where it has neither."""
    df = frame(result.get("breakdown"), (result.get("estimate") or {}).get("categories"))
    return None if df.empty else Section(t("chart.breakdown"), chart(df), prompts="breakdown")


def estimate_chart(df: pd.DataFrame) -> alt.Chart:
    """df from `frame(None, estimated)`: one horizontal bar per memory category."""
    names = [t("cat." + c) for c in CATEGORY_COLORS]
    return (
        alt.Chart(df)
        .mark_bar()
        .encode(
            y=alt.Y("category:N", sort=names, title=None, axis=alt.Axis(labelLimit=200)),
            x=alt.X("mib:Q", title=t("axis.mib")),
            color=alt.Color(
                "category:N", scale=alt.Scale(domain=names, range=list(CATEGORY_COLORS.values())), legend=None
            ),
            tooltip=[
                alt.Tooltip("category:N", title=t("axis.category")),
                alt.Tooltip("mib:Q", title=t("axis.mib"), format=MIB_FMT),
            ],
        )
        .properties(height=alt.Step(22))
    )
