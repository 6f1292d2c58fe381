"""The allocation timeline of a run (experiments/measure/history.py): live bytes after every allocation and free,
stacked by category in the app's colours, phase starts as rules. It draws what it is given: the live bytes come from
the backend (app/ui/timeline.py asks for them)."""

from __future__ import annotations

import altair as alt
import pandas as pd

from app.charts.common import BASELINE_COLOR, CATEGORY_COLORS, HEIGHT, category_name, phase_name, short_legend
from app.i18n import t
from course.units import MIB, fmt_bytes

ORDER = ("baseline", *CATEGORY_COLORS)


def _phase_label(p: dict | None) -> str:
    if not p:
        return "—"
    label = phase_name(p["phase"])
    return f"{p['step']}·{label}" if p.get("step") else label


def frame(history: dict, series: list[dict]) -> pd.DataFrame:
    """Long form: one row per event and category with live MiB (`series`: the history's live bytes per category after
    every event, app/backend.py `history_series`); the event's size, frame and phase for tooltips."""
    # Names looked up once per phase and category, not per row: a timeline has thousands of rows.
    phase_labels = {p["index"]: _phase_label(p) for p in history.get("phases") or []}
    names = {cat: category_name(cat) for cat in ORDER}
    events = {e["seq"]: e for e in history.get("events") or []}
    rows = []
    for row in series:
        e = events.get(row["seq"], {})
        for cat in ORDER:
            value = row.get(cat, 0)
            if not value and not (cat == "baseline" and history.get("start_bytes")):
                continue
            rows.append(
                {
                    "seq": row["seq"],
                    "category": names[cat],
                    "mib": value / MIB,
                    "total_mib": row["total"] / MIB,
                    "event": fmt_bytes(e.get("bytes")),
                    "frame": e.get("frame") or "—",
                    "phase": phase_labels.get(row["phase"], "—"),
                    "n": e.get("n", 1),
                }
            )
    return pd.DataFrame(rows, columns=["seq", "category", "mib", "total_mib", "event", "frame", "phase", "n"])


def phase_rules(history: dict) -> pd.DataFrame:
    rows = [
        {"seq": p["seq"], "phase": _phase_label(p)} for p in history.get("phases") or [] if p.get("seq") is not None
    ]
    return pd.DataFrame(rows, columns=["seq", "phase"])


def _color(used: list[str]) -> alt.Color:
    domain = [category_name(c) for c in ORDER]
    colors = [BASELINE_COLOR, *CATEGORY_COLORS.values()]
    return alt.Color(
        "category:N",
        title=t("axis.category"),
        scale=alt.Scale(domain=domain, range=colors),
        # One column below the chart: two are cut off in a half-width column.
        legend=short_legend(values=used),
    )


def chart(df: pd.DataFrame, rules: pd.DataFrame) -> alt.LayerChart:
    """Stacked areas (a step after every event) in the app's category colours; grey rules at phase starts."""
    used = list(dict.fromkeys(df["category"]))
    order = {c: i for i, c in enumerate(category_name(c) for c in ORDER)}
    df = df.assign(order=df["category"].map(order))
    tooltip = [
        alt.Tooltip("seq:Q", title=t("timeline.axis.event")),
        alt.Tooltip("phase:N", title=t("axis.phase")),
        alt.Tooltip("event:N", title=t("timeline.tip.event")),
        alt.Tooltip("frame:N", title=t("timeline.tip.frame")),
        alt.Tooltip("category:N", title=t("axis.category")),
        alt.Tooltip("mib:Q", title=t("axis.mib"), format=",.2f"),
        alt.Tooltip("total_mib:Q", title=t("timeline.tip.total"), format=",.2f"),
    ]
    area = (
        alt.Chart(df)
        .mark_area(interpolate="step-after")
        .encode(
            x=alt.X("seq:Q", title=t("timeline.axis.event_short"), axis=alt.Axis(titleAnchor="end")),
            y=alt.Y("mib:Q", title=t("axis.mib"), stack="zero"),
            color=_color(used),
            order=alt.Order("order:Q"),
            tooltip=tooltip,
        )
    )
    layers = [area]
    if not rules.empty:
        layers.append(
            alt.Chart(rules)
            .mark_rule(color="#888", strokeDash=[3, 3], strokeWidth=1)
            .encode(x="seq:Q", tooltip=[alt.Tooltip("phase:N", title=t("axis.phase"))])
        )
    # Streamlit fits the legend into the chart's height: one row per category.
    return alt.layer(*layers).properties(height=HEIGHT + 60 + 22 * len(used))


def figure(history: dict, series: list[dict]) -> alt.LayerChart | None:
    """The timeline of `history` (with its `series`, as `frame` takes them) and its phase rules; None without events."""
    df = frame(history, series)
    return None if df.empty else chart(df, phase_rules(history))
