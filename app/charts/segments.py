"""The caching allocator's reserved segments with the blocks inside them: free blocks grey, reserved but
unallocated (a run's timeline, a fragmentation pattern's end state)."""

from __future__ import annotations

import altair as alt
import pandas as pd

from app.charts.common import CATEGORY_COLORS, FREE_COLOR, category_name, row_axis, row_names, short_legend
from app.i18n import t
from course.units import MIB, fmt_bytes


def frame(segments: list[dict]) -> pd.DataFrame:
    rows, names = (
        [],
        {"free": t("timeline.free"), "allocated": t("timeline.allocated")},
    )  # looked up once, not per block
    for n, seg in enumerate(segments):
        label = t("timeline.segment", n=n + 1, size=fmt_bytes(seg.get("total_bytes")))
        for b in seg.get("blocks") or []:
            free = b.get("state") != "allocated"
            cat = "free" if free else (b.get("category") or "allocated")
            rows.append(
                {
                    "segment": label,
                    "start": b["offset"] / MIB,
                    "end": (b["offset"] + b["size"]) / MIB,
                    "size": fmt_bytes(b["size"]),
                    "category": names[cat] if cat in names else names.setdefault(cat, category_name(cat)),
                    "frame": b.get("frame") or "—",
                }
            )
    return pd.DataFrame(rows, columns=["segment", "start", "end", "size", "category", "frame"])


def chart(df: pd.DataFrame) -> alt.Chart:
    """One bar per reserved segment; its blocks side by side."""
    domain = [t("timeline.free"), t("timeline.allocated")] + [category_name(c) for c in CATEGORY_COLORS]
    colors = [FREE_COLOR, CATEGORY_COLORS["parameters"]] + list(CATEGORY_COLORS.values())
    used = list(dict.fromkeys(df["category"]))
    bars = (
        alt.Chart(df)
        .mark_bar(stroke="white", strokeWidth=0.5, size=14)
        .encode(
            # Segment names above their bars (row_names): as axis labels they push the plot, and with it the legend
            # that starts where the plot does, past a half-width column's edge.
            y=row_axis("segment"),
            # Ending at the plot's right edge, a title wider than the plot runs left, not past the chart's edge.
            x=alt.X("start:Q", title=t("timeline.axis.offset"), axis=alt.Axis(titleAnchor="end")),
            x2="end:Q",
            color=alt.Color(
                "category:N",
                title=None,
                scale=alt.Scale(domain=domain, range=colors),
                legend=short_legend(values=used),
            ),
            tooltip=[
                alt.Tooltip("segment:N", title=t("timeline.tip.segment")),
                alt.Tooltip("category:N", title=t("axis.category")),
                alt.Tooltip("size:N", title=t("timeline.tip.size")),
                alt.Tooltip("frame:N", title=t("timeline.tip.frame")),
            ],
        )
    )
    return alt.layer(bars, row_names(df, "segment")).properties(
        height=60 + 40 * df["segment"].nunique() + 22 * len(used)
    )


def figure(segments: list[dict]) -> alt.Chart:
    return chart(frame(segments))
