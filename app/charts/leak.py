"""Allocated memory step by step, one line per leak scenario, and the scenarios' growth as a table."""

from __future__ import annotations

import altair as alt
import pandas as pd

from app.charts.common import HEIGHT, mib
from app.i18n import t
from course.units import MIB, fmt_bytes


def frame(results: list[tuple[str, dict]]) -> pd.DataFrame:
    rows = []
    for label, result in results:
        for point in result.get("per_step") or []:
            rows.append({"scenario": label, "step": point["step"], "mib": point["allocated_bytes"] / MIB})
    return pd.DataFrame(rows, columns=["scenario", "step", "mib"])


def table(results: list[tuple[str, dict]], verdicts: dict | None = None) -> pd.DataFrame:
    """One row per scenario; bytes formatted in the page's units (a raw integer column hides a factor of 10)."""
    rows = []
    for label, result in results:
        per_step = result.get("per_step") or []
        row = {t("col.scenario"): label, t("col.growth_bytes_per_step"): fmt_bytes(result.get("growth_bytes_per_step"))}
        if verdicts is not None:
            verdict = verdicts.get(label)
            row[t("col.as_expected")] = "—" if verdict is None else ("✓" if verdict else "✗")
        row[t("col.first_mib")] = mib(per_step[0]["allocated_bytes"]) if per_step else None
        row[t("col.last_mib")] = mib(per_step[-1]["allocated_bytes"]) if per_step else None
        if result.get("gc_freed_bytes") is not None:  # results recorded before it was measured have none
            row[t("col.gc_freed")] = fmt_bytes(result["gc_freed_bytes"])
        rows.append(row)
    return pd.DataFrame(rows)


def chart(df: pd.DataFrame) -> alt.Chart:
    """df from `frame`: scenario, step, mib (one line per scenario)."""
    return (
        alt.Chart(df)
        .mark_line(point=True)
        .encode(
            x=alt.X("step:Q", title=t("axis.step"), axis=alt.Axis(tickMinStep=1)),
            # The axis on the right: the legend below starts where the plot does, and a scenario's id
            # ("append_scalar_loss_after_backward") needs the half-width column's whole width.
            y=alt.Y("mib:Q", title=t("axis.allocated_mib"), scale=alt.Scale(zero=False), axis=alt.Axis(orient="right")),
            color=alt.Color(
                "scenario:N",
                title=t("axis.scenario"),
                legend=alt.Legend(
                    orient="bottom",
                    columns=1,
                    labelLimit=0,
                    # The scenario's name only: its whole description is in the picker above the chart and
                    # in the tooltip, and would be cut in a half-width column on a projector.
                    labelExpr="split(split(datum.label, '：')[0], ': ')[0]",
                ),
            ),
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
