"""Step time per run or strategy: the median as a horizontal bar, the 10th to 90th percentile as a whisker."""

from __future__ import annotations

import altair as alt
import pandas as pd

from app.charts.common import Section
from app.i18n import t


def frame(items: list[tuple[str, dict | None]]) -> pd.DataFrame:
    """(label, a result's step_ms) -> label, median, p10, p90; runs without a timed step are left out."""
    rows = []
    for label, step_ms in items:
        if step_ms and step_ms.get("median") is not None:
            rows.append(
                {"label": label, "median": step_ms["median"], "p10": step_ms.get("p10"), "p90": step_ms.get("p90")}
            )
    return pd.DataFrame(rows, columns=["label", "median", "p10", "p90"])


def chart(df: pd.DataFrame) -> alt.Chart:
    y = alt.Y("label:N", sort=list(df["label"]), title=None, axis=alt.Axis(labels=False, ticks=False))
    tooltip = [
        alt.Tooltip("label:N", title=t("axis.run")),
        alt.Tooltip("median:Q", title=t("col.step_ms"), format=",.2f"),
        alt.Tooltip("p10:Q", title=t("col.p10"), format=",.2f"),
        alt.Tooltip("p90:Q", title=t("col.p90"), format=",.2f"),
    ]
    base = alt.Chart(df).encode(y=y, tooltip=tooltip)
    bars = base.mark_bar(color="#4c78a8", size=14).encode(x=alt.X("median:Q", title=t("axis.step_ms")))
    whisker = base.mark_rule(color="#333", strokeWidth=1.5).encode(x="p10:Q", x2="p90:Q")
    ends = [
        base.mark_tick(color="#333", size=14, thickness=1.5, orient="vertical").encode(x=f"{q}:Q")
        for q in ("p10", "p90")
    ]
    names = base.mark_text(align="left", baseline="bottom", dx=2, dy=-11, fontSize=12).encode(
        x=alt.value(0), text="label:N", color=alt.value("#31333f")
    )  # the names above the bars, across the whole width (common.labelled_bars)
    return alt.layer(bars, whisker, *ends, names).properties(height=alt.Step(40))


def section(result: dict) -> Section | None:
    """One run's step time, or None where no step was timed."""
    df = frame([(t("chart.this_run"), result.get("step_ms"))])
    return None if df.empty else Section(t("chart.time"), chart(df), prompts="time")
