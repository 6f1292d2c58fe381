"""Every Altair chart of the app, each built from a DataFrame made in app/charts/frames.py."""

from __future__ import annotations

import altair as alt
import pandas as pd

from app.charts.common import CATEGORY_COLORS, HEIGHT, MIB_FMT
from app.i18n import t


def memory_chart(df: pd.DataFrame, y_max: float | None = None) -> alt.Chart:
    """df from frames.memory_long: order, label, ms, series, mib. `y_max`: a shared scale for charts side by side."""
    order = list(dict.fromkeys(df.sort_values("order")["label"]))
    peak_name = t("series.peak")
    # Every phase label is shown (Vega hides overlapping ones by default, dropping whole steps).
    axis = alt.Axis(labelAngle=-60, labelLimit=140, labelOverlap=False, labelFontSize=10)
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
        legend=alt.Legend(orient="top"),
    )
    base = alt.Chart(df).encode(x=x, y=y, color=color, tooltip=tooltip)
    bars = base.transform_filter(alt.datum.series == peak_name).mark_bar(opacity=0.6)
    lines = base.transform_filter(alt.datum.series != peak_name).mark_line(point=True)
    return (bars + lines).properties(height=HEIGHT)


def breakdown_chart(df: pd.DataFrame) -> alt.Chart:
    """df from frames.breakdown_frame: source, category, mib (stacked per source)."""
    names = [t("cat." + c) for c in CATEGORY_COLORS]
    return (
        alt.Chart(df)
        .mark_bar()
        .encode(
            x=alt.X("source:N", title=None, axis=alt.Axis(labelAngle=0)),
            y=alt.Y("sum(mib):Q", title=t("axis.mib"), stack="zero"),
            color=alt.Color(
                "category:N",
                title=t("axis.category"),
                scale=alt.Scale(domain=names, range=list(CATEGORY_COLORS.values())),
                # Below the bars: beside them it takes the whole width of a half-screen column.
                legend=alt.Legend(orient="bottom", columns=1, labelLimit=320),
            ),
            order=alt.Order("category:N"),
            tooltip=[
                alt.Tooltip("source:N", title=t("axis.source")),
                alt.Tooltip("category:N", title=t("axis.category")),
                alt.Tooltip("mib:Q", title=t("axis.mib"), format=MIB_FMT),
            ],
        )
        .properties(height=HEIGHT + 200)  # the legend, one row per category, shares the chart's height
    )


def step_time_chart(df: pd.DataFrame) -> alt.Chart:
    """df from frames.step_time_frame: label, median, p10, p90 (one horizontal bar per run or strategy)."""
    y = alt.Y("label:N", sort=list(df["label"]), title=None, axis=alt.Axis(labelLimit=260))
    tooltip = [
        alt.Tooltip("label:N", title=t("axis.run")),
        alt.Tooltip("median:Q", title=t("col.step_ms"), format=",.2f"),
        alt.Tooltip("p10:Q", title=t("col.p10"), format=",.2f"),
        alt.Tooltip("p90:Q", title=t("col.p90"), format=",.2f"),
    ]
    base = alt.Chart(df).encode(y=y, tooltip=tooltip)
    bars = base.mark_bar(color="#4c78a8").encode(x=alt.X("median:Q", title=t("axis.step_ms")))
    whisker = base.mark_rule(color="#333", strokeWidth=1.5).encode(x="p10:Q", x2="p90:Q")
    ends = [base.mark_tick(color="#333", size=14, thickness=1.5, orient="vertical").encode(x=f"{q}:Q")
            for q in ("p10", "p90")]
    return alt.layer(bars, whisker, *ends).properties(height=alt.Step(34))


def leak_chart(df: pd.DataFrame) -> alt.Chart:
    """df from frames.leak_frame: scenario, step, mib (one line per scenario)."""
    return (
        alt.Chart(df)
        .mark_line(point=True)
        .encode(
            x=alt.X("step:Q", title=t("axis.step"), axis=alt.Axis(tickMinStep=1)),
            y=alt.Y("mib:Q", title=t("axis.allocated_mib"), scale=alt.Scale(zero=False)),
            color=alt.Color("scenario:N", title=t("axis.scenario"),
                            legend=alt.Legend(orient="bottom", columns=1, labelLimit=480)),
            # Scenarios that grow alike draw on top of each other; dashes keep both visible.
            strokeDash=alt.StrokeDash("scenario:N", legend=None),
            tooltip=[
                alt.Tooltip("scenario:N", title=t("axis.scenario")),
                alt.Tooltip("step:Q", title=t("axis.step")),
                alt.Tooltip("mib:Q", title=t("axis.allocated_mib"), format=",.3f"),
            ],
        )
        # Streamlit fits the whole chart, legend included, into the height: one legend row per scenario.
        .properties(height=HEIGHT + 30 * (df["scenario"].nunique() + 1))
    )


def peak_chart(df: pd.DataFrame) -> alt.Chart:
    """df from frames.compare_frame: one horizontal bar of peak MiB per strategy, OOM runs marked red."""
    return (
        alt.Chart(df)
        .mark_bar()
        .encode(
            y=alt.Y("label:N", sort=list(df["label"]), title=None, axis=alt.Axis(labelLimit=260)),
            x=alt.X("peak_mib:Q", title=t("axis.net_peak_mib")),
            color=alt.condition(alt.datum.oom, alt.value("#e45756"), alt.value("#4c78a8")),
            tooltip=[
                alt.Tooltip("label:N", title=t("col.strategy")),
                alt.Tooltip("peak_mib:Q", title=t("col.net_peak_mib"), format=MIB_FMT),
                alt.Tooltip("peak_abs_mib:Q", title=t("col.abs_peak_mib"), format=MIB_FMT),
                alt.Tooltip("median:Q", title=t("col.step_ms"), format=",.2f"),
            ],
        )
        .properties(height=alt.Step(34))
    )


def driver_chart(df: pd.DataFrame) -> alt.Chart:
    """df from frames.driver_frame: view, mib (driver used > reserved > allocated)."""
    return (
        alt.Chart(df)
        .mark_bar()
        .encode(
            y=alt.Y("view:N", sort=list(df["view"]), title=None, axis=alt.Axis(labelLimit=260)),
            x=alt.X("mib:Q", title=t("axis.mib")),
            color=alt.Color("view:N", legend=None),
            tooltip=[alt.Tooltip("view:N", title=" "), alt.Tooltip("mib:Q", title=t("axis.mib"), format=MIB_FMT)],
        )
        .properties(height=150)
    )


def estimate_chart(df: pd.DataFrame) -> alt.Chart:
    """df from frames.breakdown_frame (estimated only): one horizontal bar per memory category."""
    names = [t("cat." + c) for c in CATEGORY_COLORS]
    return (
        alt.Chart(df)
        .mark_bar()
        .encode(
            y=alt.Y("category:N", sort=names, title=None, axis=alt.Axis(labelLimit=200)),
            x=alt.X("mib:Q", title=t("axis.mib")),
            color=alt.Color("category:N", scale=alt.Scale(domain=names, range=list(CATEGORY_COLORS.values())),
                            legend=None),
            tooltip=[
                alt.Tooltip("category:N", title=t("axis.category")),
                alt.Tooltip("mib:Q", title=t("axis.mib"), format=MIB_FMT),
            ],
        )
        .properties(height=alt.Step(22))
    )


def fragmentation_chart(df: pd.DataFrame) -> alt.Chart:
    """df from frames.fragmentation_frame: allocated (solid) and reserved (dashed) per allocator setting."""
    return (
        alt.Chart(df)
        .mark_line(point=alt.OverlayMarkDef(size=18))
        .encode(
            x=alt.X("i:Q", title=t("axis.operation")),
            y=alt.Y("mib:Q", title=t("axis.mib")),
            color=alt.Color("allocator:N", title=None, legend=alt.Legend(orient="top"),
                            scale=alt.Scale(range=["#e45756", "#4c78a8"])),
            strokeDash=alt.StrokeDash("series:N", title=None, legend=alt.Legend(orient="top")),
            tooltip=[alt.Tooltip("allocator:N", title=t("frag.col.allocator")),
                     alt.Tooltip("op:N", title=t("axis.operation")),
                     alt.Tooltip("series:N", title=t("axis.series")),
                     alt.Tooltip("mib:Q", title=t("axis.mib"), format=MIB_FMT)],
        )
        .properties(height=HEIGHT)
    )


def rounds_chart(df: pd.DataFrame) -> alt.Chart:
    """df from frames.rounds_frame: each round's median as a point, the median over rounds as a tick."""
    y = alt.Y("label:N", title=None, sort=None, axis=alt.Axis(labelLimit=220))
    points = alt.Chart(df).mark_circle(size=60, opacity=0.7).encode(
        x=alt.X("ms:Q", title=t("axis.step_ms"), scale=alt.Scale(zero=False)), y=y,
        color=alt.Color("round:O", title=t("axis.round"), legend=alt.Legend(orient="top")),
        tooltip=[alt.Tooltip("label:N", title=t("col.strategy")), alt.Tooltip("round:O", title=t("axis.round")),
                 alt.Tooltip("ms:Q", title=t("axis.step_ms"), format=",.3f")],
    )
    ticks = alt.Chart(df).mark_tick(thickness=3, size=22, color="black").encode(x="median:Q", y=y)
    # The legend on top shares the chart's height with the rows.
    return (points + ticks).properties(height=80 + 36 * df["label"].nunique())


def paired_chart(df: pd.DataFrame, versus: str) -> alt.Chart:
    """df from frames.paired_frame: each round's ratio as a point, their median as a tick, 1 (as fast as
    `versus`) as a rule. A log axis puts 0.5 and 2 equally far from 1."""
    y = alt.Y("label:N", title=None, sort=None, axis=alt.Axis(labelLimit=220))
    x = alt.X("ratio:Q", title=t("axis.paired_ratio", versus=versus), scale=alt.Scale(type="log", zero=False))
    points = alt.Chart(df).mark_circle(size=60, opacity=0.7).encode(
        x=x, y=y, color=alt.Color("round:O", title=t("axis.round"), legend=alt.Legend(orient="top")),
        tooltip=[alt.Tooltip("label:N", title=t("col.strategy")), alt.Tooltip("round:O", title=t("axis.round")),
                 alt.Tooltip("ratio:Q", title=t("axis.paired_ratio", versus=versus), format=".3f")],
    )
    ticks = alt.Chart(df).mark_tick(thickness=3, size=22, color="black").encode(x="median:Q", y=y)
    one = alt.Chart(pd.DataFrame({"ratio": [1.0]})).mark_rule(strokeDash=[4, 3], color="#888").encode(x="ratio:Q")
    return (one + points + ticks).properties(height=80 + 36 * df["label"].nunique())
