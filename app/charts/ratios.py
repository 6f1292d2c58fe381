"""Time ratios paired by round (experiments/core/metrics.py: paired): each round's ratio to the first strategy as a
point, their median as a tick, 1 (as fast) as a rule, on a log axis that puts 0.5 and 2 equally far from 1."""

from __future__ import annotations

import altair as alt
import pandas as pd

from app.backend import paired
from app.i18n import t


def frame(result: dict, titles: dict[str, str], versus: str) -> pd.DataFrame:
    """One row per strategy (other than `versus`) and round: its time over `versus`'s in that round."""
    rows = []
    for s in result.get("strategies") or []:
        summary = None if s["id"] == versus else paired(result, s["id"], versus)
        for r, ratio in enumerate((summary or {}).get("ratios") or []):
            rows.append(
                {"label": titles.get(s["id"], s["id"]), "round": r + 1, "ratio": ratio, "median": summary["median"]}
            )
    return pd.DataFrame(rows, columns=["label", "round", "ratio", "median"])


def chart(df: pd.DataFrame, versus: str) -> alt.Chart:
    y = alt.Y("label:N", title=None, sort=None, axis=alt.Axis(labelLimit=220))
    x = alt.X("ratio:Q", title=t("axis.paired_ratio", versus=versus), scale=alt.Scale(type="log", zero=False))
    points = (
        alt.Chart(df)
        .mark_circle(size=60, opacity=0.7)
        .encode(
            x=x,
            y=y,
            color=alt.Color("round:O", title=t("axis.round"), legend=alt.Legend(orient="top")),
            tooltip=[
                alt.Tooltip("label:N", title=t("col.strategy")),
                alt.Tooltip("round:O", title=t("axis.round")),
                alt.Tooltip("ratio:Q", title=t("axis.paired_ratio", versus=versus), format=".3f"),
            ],
        )
    )
    ticks = alt.Chart(df).mark_tick(thickness=3, size=22, color="black").encode(x="median:Q", y=y)
    one = alt.Chart(pd.DataFrame({"ratio": [1.0]})).mark_rule(strokeDash=[4, 3], color="#888").encode(x="ratio:Q")
    return (one + points + ticks).properties(height=80 + 36 * df["label"].nunique())
