"""Time ratios paired by round (experiments/core/metrics.py: paired): each round's ratio to the first strategy as a
point, their median as a tick, 1 (as fast) as a rule, on a log axis that puts 0.5 and 2 equally far from 1."""

from __future__ import annotations

import math

import altair as alt
import pandas as pd

from app.backend import paired
from app.charts.common import row_axis, row_names
from app.i18n import t

MAX_TICKS = 5


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


def log2_ticks(lo: float, hi: float) -> list[float]:
    """Powers of two from `lo` or below to `hi` or above, 1 always among them, at most MAX_TICKS of them (every
    second or fourth power over a wide range): Vega's own log ticks put 0.1 and 10 on a narrow axis, drawn over each
    other, and nothing between."""
    if not (0 < lo <= hi < math.inf):
        raise ValueError(f"ratios must be positive and finite, got {lo}..{hi}")
    low, high = min(0, math.floor(math.log2(lo))), max(0, math.ceil(math.log2(hi)))
    if low == high:
        low, high = -1, 1
    step = 1
    while (math.ceil(high / step) - math.floor(low / step)) + 1 > MAX_TICKS:
        step *= 2
    return [2.0 ** (e * step) for e in range(math.floor(low / step), math.ceil(high / step) + 1)]


def chart(df: pd.DataFrame, versus: str) -> alt.Chart:
    y = row_axis()
    shown = df["ratio"][(df["ratio"] > 0) & (df["ratio"] < math.inf)]  # a log axis draws no other
    ticks_at = log2_ticks(float(shown.min()), float(shown.max())) if len(shown) else [0.5, 1.0, 2.0]
    x = alt.X(
        "ratio:Q",
        title=t("axis.time_ratio", versus=versus),
        scale=alt.Scale(type="log", domain=[ticks_at[0], ticks_at[-1]]),
        axis=alt.Axis(values=ticks_at, format="~g", labelFlush=True),
    )
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
    ticks = alt.Chart(df).mark_tick(thickness=3, size=16, color="black").encode(x="median:Q", y=y)
    one = alt.Chart(pd.DataFrame({"ratio": [1.0]})).mark_rule(strokeDash=[4, 3], color="#888").encode(x="ratio:Q")
    return (one + points + ticks + row_names(df)).properties(height=90 + 46 * df["label"].nunique())
