"""Each rank of a data-parallel run, phase by phase: allocated, peak (and reserved where the device has it) above
the rank's own baseline, one line style per rank."""

from __future__ import annotations

import altair as alt
import pandas as pd

from app.charts.common import HEIGHT, MIB_FMT, phase_label
from app.i18n import t
from course.units import MIB


def frame(result: dict) -> pd.DataFrame:
    """One row per rank, phase and series (allocated, peak, and reserved where the device has it)."""
    accum = int((result.get("config") or {}).get("accum") or 1)
    rows = []
    for rank in result.get("ranks") or []:
        base = rank.get("baseline_bytes") or 0
        for i, p in enumerate(rank.get("phases") or []):
            for series in ("allocated", "peak", "reserved"):
                value = p.get(f"{series}_bytes")
                if value is not None:
                    rows.append(
                        {
                            "order": i,
                            "label": phase_label(p, accum),
                            "series": t("series." + series),
                            "rank": t("multigpu.rank", rank=rank["rank"]),
                            "mib": (value - base) / MIB,
                        }
                    )
    return pd.DataFrame(rows, columns=["order", "label", "series", "rank", "mib"])


def chart(df: pd.DataFrame) -> alt.Chart:
    order = list(dict.fromkeys(df.sort_values("order")["label"]))
    axis = alt.Axis(labelAngle=-90, labelLimit=140, labelOverlap="greedy", labelFontSize=12)
    return (
        alt.Chart(df)
        .mark_line(point=True)
        .encode(
            x=alt.X("label:N", sort=order, title=t("axis.phase"), axis=axis),
            y=alt.Y("mib:Q", title=t("axis.mib")),
            # One name a row: in one row the series and the ranks are wider than half a projector ("● ra").
            color=alt.Color("series:N", title=None, legend=alt.Legend(orient="top", columns=1)),
            strokeDash=alt.StrokeDash("rank:N", title=None, legend=alt.Legend(orient="top", columns=1)),
            tooltip=[
                alt.Tooltip("rank:N"),
                alt.Tooltip("label:N", title=t("axis.phase")),
                alt.Tooltip("series:N", title=t("axis.series")),
                alt.Tooltip("mib:Q", title=t("axis.mib"), format=MIB_FMT),
            ],
        )
        .properties(height=HEIGHT + 20 * df["series"].nunique())
    )
