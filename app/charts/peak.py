"""Peak memory per strategy or run, one horizontal bar each (above the engine's pre-run baseline, as the estimate
and the claims count it; runs that ran out of memory in red), and the comparison table."""

from __future__ import annotations

import altair as alt
import pandas as pd

from app.backend import net_peak
from app.charts.common import MIB_FMT, labelled_bars, mib
from app.i18n import t

COLUMNS = ["label", "peak_mib", "peak_abs_mib", "median", "p10", "p90", "samples_per_s", "oom"]


def frame(items: list[tuple[str, dict]]) -> pd.DataFrame:
    rows = []
    for label, result in items:
        step_ms = result.get("step_ms") or {}
        rows.append(
            {
                "label": label,
                "peak_mib": mib(net_peak(result)),
                "peak_abs_mib": mib(result.get("peak_bytes")),
                "median": step_ms.get("median"),
                "p10": step_ms.get("p10"),
                "p90": step_ms.get("p90"),
                "samples_per_s": result.get("samples_per_s"),
                "oom": bool(result.get("oom")),
            }
        )
    return pd.DataFrame(rows, columns=COLUMNS)


def table(df: pd.DataFrame) -> pd.DataFrame:
    shown = df.assign(oom=df["oom"].map(lambda v: t("yes") if v else t("no"))).round(
        {"peak_mib": 1, "peak_abs_mib": 1, "median": 2, "p10": 2, "p90": 2, "samples_per_s": 0}
    )
    names = {
        "label": "col.strategy",
        "peak_mib": "col.net_peak_mib",
        "peak_abs_mib": "col.abs_peak_mib",
        "median": "col.step_ms",
        "p10": "col.p10",
        "p90": "col.p90",
        "samples_per_s": "col.samples_per_s",
        "oom": "col.oom",
    }
    return shown.rename(columns={c: t(k) for c, k in names.items()})


def chart(df: pd.DataFrame) -> alt.Chart:
    bars = (
        alt.Chart(df)
        .mark_bar(size=14)
        .encode(
            y=alt.Y("label:N", sort=list(df["label"]), title=None, axis=alt.Axis(labels=False, ticks=False)),
            x=alt.X("peak_mib:Q", title=t("axis.net_peak_mib")),
            color=alt.condition(alt.datum.oom, alt.value("#e45756"), alt.value("#4c78a8")),
            tooltip=[
                alt.Tooltip("label:N", title=t("col.strategy")),
                alt.Tooltip("peak_mib:Q", title=t("col.net_peak_mib"), format=MIB_FMT),
                alt.Tooltip("peak_abs_mib:Q", title=t("col.abs_peak_mib"), format=MIB_FMT),
                alt.Tooltip("median:Q", title=t("col.step_ms"), format=",.2f"),
            ],
        )
        .properties(height=alt.Step(40))
    )
    return labelled_bars(bars)
