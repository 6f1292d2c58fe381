"""Each rank of a data-parallel run on a time axis: its phases end to end by their measured durations, one row per
rank. What a distributed result records (every rank's phase rows), not a per-allocation history, which no rank
records."""

from __future__ import annotations

import altair as alt
import pandas as pd

from app.charts.common import MIB_FMT, phase_label, phase_name
from app.i18n import t
from course.units import MIB


def frame(result: dict) -> pd.DataFrame:
    """One row per rank and phase: when it started and ended (ms from the rank's first phase), and the memory
    allocated at its end and at its peak, above the rank's baseline."""
    accum = int((result.get("config") or {}).get("accum") or 1)
    rows = []
    for rank in result.get("ranks") or []:
        base, at = rank.get("baseline_bytes") or 0, 0.0
        for i, p in enumerate(rank.get("phases") or []):
            ms = p.get("ms")
            if ms is None:
                continue
            rows.append(
                {
                    "rank": t("multigpu.rank", rank=rank["rank"]),
                    "order": i,
                    "phase": phase_name(p["phase"]),
                    "label": phase_label(p, accum),
                    "start_ms": at,
                    "end_ms": at + ms,
                    "allocated_mib": None if p.get("allocated_bytes") is None else (p["allocated_bytes"] - base) / MIB,
                    "peak_mib": None if p.get("peak_bytes") is None else (p["peak_bytes"] - base) / MIB,
                }
            )
            at += ms
    columns = ["rank", "order", "phase", "label", "start_ms", "end_ms", "allocated_mib", "peak_mib"]
    return pd.DataFrame(rows, columns=columns)


def chart(df: pd.DataFrame) -> alt.Chart:
    phases = list(dict.fromkeys(df.sort_values("order")["phase"]))
    return (
        alt.Chart(df)
        .mark_bar(stroke="white", strokeWidth=0.5)
        .encode(
            x=alt.X("start_ms:Q", title=t("multigpu.timeline.axis")),
            x2="end_ms:Q",
            y=alt.Y("rank:N", title=None),
            color=alt.Color(
                "phase:N", sort=phases, title=None, legend=alt.Legend(orient="top", columns=3, labelLimit=0)
            ),
            tooltip=[
                alt.Tooltip("rank:N"),
                alt.Tooltip("label:N", title=t("axis.phase")),
                alt.Tooltip("start_ms:Q", title=t("multigpu.timeline.start"), format=",.1f"),
                alt.Tooltip("end_ms:Q", title=t("multigpu.timeline.end"), format=",.1f"),
                alt.Tooltip("allocated_mib:Q", title=t("series.allocated"), format=MIB_FMT),
                alt.Tooltip("peak_mib:Q", title=t("series.peak"), format=MIB_FMT),
            ],
        )
        .properties(height=60 + 40 * df["rank"].nunique())
    )
