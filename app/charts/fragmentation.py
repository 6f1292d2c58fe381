"""One allocation pattern under both allocator settings: allocated (solid) and reserved (dashed) after every
allocation and free, and each setting's segments at the end as a table."""

from __future__ import annotations

import altair as alt
import pandas as pd

from app.charts.common import HEIGHT, MIB_FMT
from app.i18n import t
from course.units import MIB, fmt_bytes


def frame(result: dict) -> pd.DataFrame:
    """Allocated and reserved after every allocation and free, per allocator setting (long form)."""
    rows = []
    for allocator, run in (result.get("runs") or {}).items():
        for p in run.get("points") or []:
            for series in ("allocated", "reserved"):
                rows.append(
                    {
                        "allocator": t("frag.allocator." + allocator),
                        "i": p["i"],
                        "op": p["op"],
                        "series": t("frag.series." + series),
                        "mib": p[f"{series}_bytes"] / MIB,
                    }
                )
    return pd.DataFrame(rows, columns=["allocator", "i", "op", "series", "mib"])


def segments_table(result: dict) -> pd.DataFrame:
    rows = []
    for allocator, run in (result.get("runs") or {}).items():
        for n, seg in enumerate((run.get("end") or {}).get("segments") or []):
            rows.append(
                {
                    t("frag.col.allocator"): t("frag.allocator." + allocator),
                    t("frag.col.segment"): n + 1,
                    t("frag.col.size"): fmt_bytes(seg["total_bytes"]),
                    t("frag.col.in_use"): fmt_bytes(seg["allocated_bytes"]),
                    t("frag.col.free"): fmt_bytes(seg["total_bytes"] - seg["allocated_bytes"]),
                    t("frag.col.blocks"): seg.get("live_blocks"),
                }
            )
    return pd.DataFrame(rows)


def chart(df: pd.DataFrame) -> alt.Chart:
    return (
        alt.Chart(df)
        .mark_line(point=alt.OverlayMarkDef(size=18))
        .encode(
            x=alt.X("i:Q", title=t("axis.operation")),
            # The axis on the right: legends start where the plot does, and "expandable_segments:True" needs the
            # half-width column's whole width.
            y=alt.Y("mib:Q", title=t("axis.mib"), axis=alt.Axis(orient="right")),
            color=alt.Color(
                "allocator:N",
                title=None,
                legend=alt.Legend(orient="top", columns=1, labelLimit=0),  # "expandable_segments:True" whole
                scale=alt.Scale(range=["#e45756", "#4c78a8"]),
            ),
            # Below, not beside the allocators' legend: side by side the two run past the chart's edge.
            strokeDash=alt.StrokeDash("series:N", title=None, legend=alt.Legend(orient="bottom", columns=1)),
            tooltip=[
                alt.Tooltip("allocator:N", title=t("frag.col.allocator")),
                alt.Tooltip("op:N", title=t("axis.operation")),
                alt.Tooltip("series:N", title=t("axis.series")),
                alt.Tooltip("mib:Q", title=t("axis.mib"), format=MIB_FMT),
            ],
        )
        .properties(height=HEIGHT)
    )
