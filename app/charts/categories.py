"""Memory by category, one horizontal stacked bar per label on one shared axis (data-parallel strategies or the
ranks of one run): device memory, and host memory (CPU offload) as a paler bar of its own."""

from __future__ import annotations

import altair as alt
import pandas as pd

from app.charts.common import MIB_FMT, RANK_COLORS, row_axis, row_names, short_legend
from app.i18n import t
from course.units import MIB


def rank_breakdowns(part: dict, result: dict) -> tuple[dict | None, dict | None]:
    """(device, host) categories at the peak of a rank (or of the result's rank 0). A GPU run with CPU offload that
    was recorded before host memory was counted apart has them summed into one: neither is shown then."""
    device, host = part.get("breakdown"), part.get("host_breakdown")
    if host is None and awaits_split({**result, "ranks": [part]}):
        return None, None
    # Every GPU rank keeps a few bytes on the host (Adam's step counters): a bar only when it is worth one.
    if host and sum(host.values()) < 0.01 * sum((device or {}).values()):
        host = None
    return device, host


def awaits_split(result: dict) -> bool:
    """A CPU-offload recording made before host memory was counted apart: its measured categories mean nothing."""
    ranks = result.get("ranks") or [result]
    return result.get("strategy") == "fsdp2_offload" and not any("host_breakdown" in r for r in ranks)


def as_measured(result: dict) -> dict:
    """The result as the page's checks may read it: a breakdown that summed host and device memory is not one."""
    return {**result, "breakdown": None, "breakdown_steady": None} if awaits_split(result) else result


def frame(items: list[tuple]) -> pd.DataFrame:
    """(label, device breakdown[, host breakdown]) -> label, memory, category, mib: one stacked bar per label.
    Host memory (CPU offload) gets a bar of its own: it is not in the device's peak, and adding it there would show
    offload saving nothing."""
    rows = []
    for label, cats, *rest in items:
        host = rest[0] if rest else None
        for memory, values, name in (("device", cats, label), ("host", host, t("multigpu.host_bar", label=label))):
            for cat in RANK_COLORS:
                value = (values or {}).get(cat)
                if value:
                    rows.append(
                        {
                            "label": name,
                            "memory": t("multigpu.memory." + memory),
                            "category": t("cat." + cat),
                            "mib": value / MIB,
                        }
                    )
    return pd.DataFrame(rows, columns=["label", "memory", "category", "mib"])


def chart(df: pd.DataFrame) -> alt.Chart:
    memory = [t("multigpu.memory.device"), t("multigpu.memory.host")]
    bars = (
        alt.Chart(df)
        .mark_bar(size=14)
        .encode(
            # Names above their bars (row_names): as axis labels ("ZeRO-3 + offload (estimated): host memory") they
            # took half the column and pushed the legend, which starts where the plot does, past its edge.
            y=row_axis(),  # in the frame's order, as row_names writes them
            x=alt.X("sum(mib):Q", title=t("axis.mib"), stack="zero"),
            color=alt.Color(
                "category:N",
                title=t("axis.category"),
                scale=alt.Scale(domain=[t("cat." + c) for c in RANK_COLORS], range=list(RANK_COLORS.values())),
                legend=short_legend(),
            ),
            opacity=alt.Opacity(
                "memory:N",
                scale=alt.Scale(domain=memory, range=[1.0, 0.45]),
                title=None,
                # Above the chart: beside the categories' legend below it, it runs past the chart's edge.
                legend=short_legend(orient="top") if df["memory"].nunique() > 1 else None,
            ),
            tooltip=[
                alt.Tooltip("label:N", title=t("col.strategy")),
                alt.Tooltip("memory:N", title=t("multigpu.memory")),
                alt.Tooltip("category:N", title=t("axis.category")),
                alt.Tooltip("mib:Q", title=t("axis.mib"), format=MIB_FMT),
            ],
        )
        .properties(height=alt.Step(40))
    )
    return alt.layer(bars, row_names(df))
