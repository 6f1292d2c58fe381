"""Memory per phase of one run: the peak within each phase as bars, allocated (and reserved, on a GPU) at its end
as lines; and the same figures as the phases table."""

from __future__ import annotations

import altair as alt
import pandas as pd

from app.charts.common import HEIGHT, MIB_FMT, Section, mib, phase_label, phase_name
from app.i18n import t

COLUMNS = ["order", "label", "step", "micro", "phase", "allocated_mib", "reserved_mib", "peak_mib", "ms"]


def frame(result: dict) -> pd.DataFrame:
    accum = int((result.get("config") or {}).get("accum") or 1)
    rows = []
    for i, p in enumerate(result.get("phases") or []):
        rows.append(
            {
                "order": i,
                "label": phase_label(p, accum),
                "step": p.get("step"),
                "micro": p.get("micro"),
                "phase": p.get("phase"),
                "allocated_mib": mib(p.get("allocated_bytes")),
                "reserved_mib": mib(p.get("reserved_bytes")),
                "peak_mib": mib(p.get("peak_bytes")),
                "ms": p.get("ms"),
            }
        )
    return pd.DataFrame(rows, columns=COLUMNS)


def table(df: pd.DataFrame) -> pd.DataFrame:
    """The phases table as learners read it: translated column names, no internal columns."""
    shown = df.drop(columns=["order", "label", "phase"]).assign(phase=df["phase"].map(phase_name))
    shown = shown[["step", "micro", "phase", "allocated_mib", "reserved_mib", "peak_mib", "ms"]].round(
        {"allocated_mib": 2, "reserved_mib": 2, "peak_mib": 2, "ms": 3}
    )
    return shown.rename(columns={c: t("col." + c) for c in shown.columns})


def long(df: pd.DataFrame, with_reserved: bool) -> pd.DataFrame:
    """One row per phase and series (peak, allocated, reserved), the series named in the learner's language."""
    series = ["peak_mib", "allocated_mib"] + (["reserved_mib"] if with_reserved else [])
    out = df.melt(id_vars=["order", "label", "ms"], value_vars=series, var_name="series", value_name="mib")
    out["series"] = out["series"].map(lambda s: t("series." + s.removesuffix("_mib")))
    return out.dropna(subset=["mib"])


def chart(df: pd.DataFrame, y_max: float | None = None) -> alt.Chart:
    """df from `long`: order, label, ms, series, mib. `y_max`: a shared scale for charts side by side."""
    order = list(dict.fromkeys(df.sort_values("order")["label"]))
    peak_name = t("series.peak")
    # Upright labels at 12 px, readable on a projector; only where even those would collide does Vega thin them.
    axis = alt.Axis(labelAngle=-90, labelLimit=140, labelOverlap="greedy", labelFontSize=12)
    x = alt.X("label:N", sort=order, title=t("axis.phase"), axis=axis)
    y = alt.Y("mib:Q", title=t("axis.mib"), scale=alt.Scale(domain=[0, y_max]) if y_max else alt.Undefined)
    tooltip = [
        alt.Tooltip("label:N", title=t("axis.phase")),
        alt.Tooltip("series:N", title=t("axis.series")),
        alt.Tooltip("mib:Q", title=t("axis.mib"), format=MIB_FMT),
        alt.Tooltip("ms:Q", title=t("axis.ms"), format=",.2f"),
    ]
    series_names = list(dict.fromkeys(df["series"]))
    color = alt.Color(
        "series:N",
        title=None,
        scale=alt.Scale(domain=series_names, range=["#c7c7c7", "#1f77b4", "#ff7f0e"][: len(series_names)]),
        legend=alt.Legend(orient="top", columns=1),  # in one row the three names are wider than half a projector
    )
    base = alt.Chart(df).encode(x=x, y=y, color=color, tooltip=tooltip)
    bars = base.transform_filter(alt.datum.series == peak_name).mark_bar(opacity=0.6)
    lines = base.transform_filter(alt.datum.series != peak_name).mark_line(point=True)
    return (bars + lines).properties(height=HEIGHT + 20 * len(series_names))  # the legend's rows share the height


def section(df: pd.DataFrame) -> Section | None:
    """The result's memory chart (df from `frame`), said to show no reserved line where the run has none (a CPU)."""
    if df.empty:
        return None
    with_reserved = bool(df["reserved_mib"].notna().any())
    caption = None if with_reserved else t("chart.no_reserved")
    return Section(t("chart.memory"), chart(long(df, with_reserved)), caption=caption, prompts="memory")
