"""What every chart shares: sizes, number formats, the category colours, and labels in the learner's language."""

from __future__ import annotations

import math
from dataclasses import dataclass

import altair as alt

from app import backend
from app.i18n import t
from course.units import MIB

MIB_FMT = ",.1f"
HEIGHT = 300
# One colour per category of the engine's vocabulary, in its order, so measured and estimated bars read the same
# way on every page; a data-parallel rank adds its communication buffers.
RANK_COLORS = dict(
    zip(
        backend.RANK_CATEGORIES,
        ("#4c78a8", "#f58518", "#e45756", "#72b7b2", "#54a24b", "#eeca3b", "#b279a2", "#9d755d", "#17becf"),
        strict=True,
    )
)
CATEGORY_COLORS = {c: RANK_COLORS[c] for c in backend.CATEGORIES}
# The allocation timeline and the segment view: what was allocated before the run, free space.
BASELINE_COLOR = "#bab0ac"
FREE_COLOR = "#dcdcdc"


@dataclass(frozen=True)
class Section:
    """One chart of a result as the page shows it, top to bottom: its heading, a caption above the chart, the chart
    (None: the caption alone), a text under it, and the kind of prompts ('What to notice', 'Try this') under that."""

    title: str
    figure: alt.TopLevelMixin | None = None
    caption: str | None = None
    text: str | None = None
    prompts: str | None = None


def short_legend(orient: str = "bottom", **kw) -> alt.Legend:
    """A legend one name a row that writes each name without its explanation in brackets ("Not a tensor (workspaces,
    rounding)" as "Not a tensor"): a bottom legend starts where the plot does, after the y axis, and a long name runs
    past the chart's right edge in a projector's half-width column. The tooltips keep the full names."""
    return alt.Legend(
        orient=orient, columns=1, labelLimit=0, labelExpr="split(split(datum.label, ' (')[0], '（')[0]", **kw
    )


def labelled_bars(bars, field: str = "label"):
    """A horizontal bar chart whose names are written above each bar across the chart's whole width, instead of
    as axis labels that take (and are cut to) the left half of a projector's half-width column."""
    names = bars.mark_text(align="left", baseline="bottom", dx=2, dy=-11, fontSize=12).encode(
        x=alt.value(0), text=f"{field}:N", color=alt.value("#31333f")
    )
    return alt.layer(bars, names)


def row_names(df, y: str = "label"):
    """The rows' names of a dot chart written above each row across its whole width, like `labelled_bars`: axis
    labels would take (and be cut to) half of a projector's half-width column, leaving the dots no room."""
    names = df.drop_duplicates(y)
    return (
        alt.Chart(names)
        .mark_text(align="left", baseline="bottom", dx=2, dy=-11, fontSize=12, color="#31333f")
        .encode(x=alt.value(0), y=alt.Y(f"{y}:N", sort=None), text=f"{y}:N")
    )


def row_axis(y: str = "label") -> alt.Y:
    """The y of a chart whose rows `row_names` names: no labels of its own."""
    return alt.Y(f"{y}:N", title=None, sort=None, axis=alt.Axis(labels=False, ticks=False, domain=False))


def mib(value) -> float | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value / MIB


def phase_name(phase: str) -> str:
    return t("phase." + phase, default=phase)


def phase_label(row: dict, accum: int = 1) -> str:
    """A phase row as an axis label: step·phase, its micro-batch under accumulation, ✗ where it ran out of memory."""
    if not row.get("step"):
        return phase_name(row["phase"])
    label = f"{row['step']}·{phase_name(row['phase'])}"
    if accum > 1 and row.get("micro") is not None:
        label += f"·μ{row['micro']}"
    if row.get("failed"):
        label += " ✗"  # the phase that ran out of memory; its peak is what was in use then
    return label


def category_name(cat: str) -> str:
    """A category's name; "baseline" is what was allocated before the run."""
    return t("timeline.cat.baseline") if cat == "baseline" else t("cat." + cat, default=cat)
