"""What fits: the largest batch of each precision x optimizer implementation x checkpointing, one bar each."""

from __future__ import annotations

import altair as alt
import pandas as pd

from app.charts.common import HEIGHT
from app.i18n import t
from course.units import GIB


def label(row: dict) -> str:
    """A combination in the learner's words: the sandbox's labels of its precision, implementation, checkpointing."""
    ck = f"{t('field.checkpoint')}: {t('opt.checkpoint.' + row['checkpoint'])}"
    return " · ".join([t(f"opt.precision.{row['precision']}"), t(f"opt.optimizer_impl.{row['optimizer_impl']}"), ck])


def frame(result: dict) -> pd.DataFrame:
    rows = [
        {
            t("ym.fits_col.combination"): label(r),
            t("ym.fits_col.largest_batch"): r["largest_batch"],
            t("ym.fits_col.expandable"): r.get("largest_batch_expandable", r["largest_batch"]),
            t("ym.fits_col.peak_gib"): None if r["peak_bytes"] is None else round(r["peak_bytes"] / GIB, 3),
        }
        for r in result["grid"]
    ]
    return pd.DataFrame(rows)


def chart(df: pd.DataFrame) -> alt.Chart:
    combo, batch = t("ym.fits_col.combination"), t("ym.fits_col.largest_batch")
    return (
        alt.Chart(df)
        .mark_bar()
        .encode(
            y=alt.Y(f"{combo}:N", sort=None, title=None),
            x=alt.X(f"{batch}:Q", title=batch),
            tooltip=list(df.columns),
        )
        .properties(height=max(HEIGHT // 2, 28 * len(df)))
    )
