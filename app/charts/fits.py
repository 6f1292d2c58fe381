"""What fits: the largest batch of each precision x optimizer implementation x checkpointing, one bar each."""

from __future__ import annotations

import altair as alt
import pandas as pd

from app.i18n import t
from course.units import GIB, fmt_bytes


def label(row: dict) -> str:
    """A combination in the learner's words: the sandbox's labels of its precision, implementation, checkpointing."""
    ck = f"{t('field.checkpoint')}: {t('opt.checkpoint.' + row['checkpoint'])}"
    return " · ".join([t(f"opt.precision.{row['precision']}"), t(f"opt.optimizer_impl.{row['optimizer_impl']}"), ck])


def _precision(p: str) -> str:
    return t(f"opt.precision.{p}").split(" (")[0].split("（")[0]  # "AMP bf16 (autocast)" -> "AMP bf16"


def short(row: dict) -> str:
    """The same, short enough for a chart's axis on a projector: precision, implementation, checkpointing mark."""
    ck = f" · {t('ym.col.checkpoint')}" if row["checkpoint"] != "none" else ""
    return f"{_precision(row['precision'])} · {row['optimizer_impl']}{ck}"


def frame(result: dict) -> pd.DataFrame:
    rows = [
        {
            t("ym.fits_col.combination"): short(r),
            t("field.precision"): _precision(r["precision"]),
            t("ym.col.optimizer_impl"): r["optimizer_impl"],
            t("ym.col.checkpoint"): "✓" if r["checkpoint"] != "none" else "",
            t("ym.fits_col.largest_batch"): r["largest_batch"],
            t("ym.fits_col.expandable"): r.get("largest_batch_expandable", r["largest_batch"]),
            t("ym.fits_col.peak_gib"): None if r["peak_bytes"] is None else round(r["peak_bytes"] / GIB, 3),
            t("ym.fits_col.at_batch", batch=result["batch"]): fmt_bytes(r["peak_at_batch_bytes"]),
            t("ym.fits_col.against_yours"): against(r),
        }
        for r in result["grid"]
    ]
    return pd.DataFrame(rows)


def against(row: dict) -> str:
    """What this combination saves (or costs) at the learner's batch against the learner's own levers."""
    saved = row.get("saves_bytes")
    if not saved:
        return "—"
    word = "ym.fits_saves" if saved > 0 else "ym.fits_costs"
    return t(word, bytes=fmt_bytes(abs(saved)), percent=f"{abs(row['saves_percent']):.1f}")


LEVERS = ("field.precision", "ym.col.optimizer_impl", "ym.col.checkpoint")


def table(df: pd.DataFrame) -> pd.DataFrame:
    """The grid as a table: its levers in columns of their own, the largest batches and their peak."""
    keys = (*LEVERS, "ym.fits_col.largest_batch", "ym.fits_col.expandable", "ym.fits_col.peak_gib")
    return df[[t(k) for k in keys]]


def saves_table(df: pd.DataFrame, batch: int) -> pd.DataFrame:
    """The same combinations at the learner's own batch: the peak, and what each saves against the learner's levers
    (a table of its own: side by side with the grid it would not fit a projector's half page)."""
    return df[[*(t(k) for k in LEVERS), t("ym.fits_col.at_batch", batch=batch), t("ym.fits_col.against_yours")]]


def shown(df: pd.DataFrame) -> pd.DataFrame:
    """A table's cells as the page writes them: GiB to three decimals, a missing figure as a dash."""

    def cell(v):
        if v is None or (isinstance(v, float) and pd.isna(v)):
            return "—"
        return f"{v:.3f}" if isinstance(v, float) else str(v)

    return df.map(cell)


def chart(df: pd.DataFrame) -> alt.Chart:
    combo, batch = t("ym.fits_col.combination"), t("ym.fits_col.largest_batch")
    return (
        alt.Chart(df)
        .mark_bar()
        .encode(
            y=alt.Y(f"{combo}:N", sort=None, title=None, axis=alt.Axis(labelLimit=220, labelFontSize=12)),
            x=alt.X(f"{batch}:Q", title=batch),
            tooltip=list(df.columns),
        )
        .properties(height=alt.Step(26))  # a row per combination, each label readable on a projector
    )
