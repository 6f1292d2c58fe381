"""Step times measured in interleaved rounds: each round's median per strategy as a point, the median over rounds
as a tick."""

from __future__ import annotations

import altair as alt
import pandas as pd

from app.charts.common import row_axis, row_names
from app.i18n import t


def frame(result: dict, titles: dict[str, str]) -> pd.DataFrame:
    """One row per strategy and round: the median step time of that round."""
    rows = []
    for s in result.get("strategies") or []:
        for r, ms in enumerate(s.get("round_ms") or []):
            rows.append({"label": titles.get(s["id"], s["id"]), "round": r + 1, "ms": ms, "median": s["median_ms"]})
    return pd.DataFrame(rows, columns=["label", "round", "ms", "median"])


def chart(df: pd.DataFrame) -> alt.Chart:
    y = row_axis()
    points = (
        alt.Chart(df)
        .mark_circle(size=60, opacity=0.7)
        .encode(
            x=alt.X("ms:Q", title=t("axis.step_ms"), scale=alt.Scale(zero=False)),
            y=y,
            color=alt.Color("round:O", title=t("axis.round"), legend=alt.Legend(orient="top")),
            tooltip=[
                alt.Tooltip("label:N", title=t("col.strategy")),
                alt.Tooltip("round:O", title=t("axis.round")),
                alt.Tooltip("ms:Q", title=t("axis.step_ms"), format=",.3f"),
            ],
        )
    )
    ticks = alt.Chart(df).mark_tick(thickness=3, size=16, color="black").encode(x="median:Q", y=y)
    # The legend on top shares the chart's height with the rows.
    return (points + ticks + row_names(df)).properties(height=90 + 46 * df["label"].nunique())
