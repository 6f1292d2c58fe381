"""Three views of "used memory" after a run on a GPU: the driver's (the whole process, CUDA context included), the
caching allocator's reserved, and what tensors hold (allocated)."""

from __future__ import annotations

import altair as alt
import pandas as pd

from app.charts.common import MIB_FMT, Section, labelled_bars
from app.i18n import t
from course.units import MIB


def frame(result: dict) -> pd.DataFrame | None:
    """None when the run has no driver reading (a CPU run)."""
    driver = result.get("driver")
    if not driver or driver.get("total_bytes") is None or driver.get("free_bytes") is None:
        return None
    last = (result.get("phases") or [{}])[-1]
    rows = [{"view": t("driver.used"), "mib": (driver["total_bytes"] - driver["free_bytes"]) / MIB}]
    if last.get("reserved_bytes") is not None:
        rows.append({"view": t("driver.reserved"), "mib": last["reserved_bytes"] / MIB})
    if last.get("allocated_bytes") is not None:
        rows.append({"view": t("driver.allocated"), "mib": last["allocated_bytes"] / MIB})
    return pd.DataFrame(rows, columns=["view", "mib"])


def chart(df: pd.DataFrame) -> alt.Chart:
    """The views' names above their bars: as axis labels they took most of a half-width column and squeezed the
    MiB axis until its labels ran into each other."""
    bars = (
        alt.Chart(df)
        .mark_bar(size=14)
        .encode(
            y=alt.Y("view:N", sort=list(df["view"]), title=None, axis=alt.Axis(labels=False, ticks=False)),
            x=alt.X("mib:Q", title=t("axis.mib")),
            color=alt.Color("view:N", legend=None),
            tooltip=[alt.Tooltip("view:N", title=" "), alt.Tooltip("mib:Q", title=t("axis.mib"), format=MIB_FMT)],
        )
        .properties(height=alt.Step(40))
    )
    return labelled_bars(bars, field="view")


def section(result: dict) -> Section:
    """The three views with what they tell, or why a run has none (a CPU run, or no reading)."""
    df = frame(result)
    if df is None:
        cpu = (result.get("device") or {}).get("type") != "cuda"
        return Section(t("driver.title"), caption=t("driver.cpu") if cpu else t("driver.missing"))
    return Section(t("driver.title"), chart(df), text=t("driver.explain"))
