"""The tensor census of a leak run (experiments/measure/census.py) as a table, bytes in the page's units."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app.i18n import t
from course.units import fmt_bytes


def _signed(value: int) -> str:
    return ("+" if value > 0 else "") + fmt_bytes(value) if value else "0"


def holders_text(holders: list[dict]) -> str:
    return (
        "; ".join(t("census.kind." + h["kind"], default=h["kind"] + " {name}", name=h.get("name", "")) for h in holders)
        or "—"
    )


def census_table(census: dict) -> pd.DataFrame:
    """One row per group; what a leak hunt reads first (the tensor, what one step added, who holds it) comes first,
    so that a half-width column at 1024 px shows it without scrolling."""
    rows = []
    groups = census.get("groups") or []
    one_device = len({g["device"] for g in groups}) == 1  # then the caption names it, not every row
    for g in groups:
        shape = "(" + ", ".join(str(d) for d in g["shape"]) + ("," if len(g["shape"]) == 1 else "") + ")"
        rows.append(
            {
                t("census.col.tensor"): f"{shape} {g['dtype']}" + ("" if one_device else f" {g['device']}"),
                t("census.col.bytes_delta"): _signed(g["bytes_delta"]),
                t("census.col.holders"): holders_text(g.get("holders") or []),
                t("census.col.count_delta"): f"{g['count_delta']:+d}" if g["count_delta"] else "0",
                t("census.col.count"): g["count_after"],
                t("census.col.bytes"): fmt_bytes(g["bytes_after"]),
            }
        )
    return pd.DataFrame(rows)


def render(ok: list[tuple[str, dict]], key: str, names: dict[str, str] | None = None) -> None:
    """A census table for one of the finished scenarios (the first one that grew, by default). `names`: label ->
    the short name the picker shows (a scenario's id), the whole label written under it, where it can wrap."""
    with_census = [(label, r) for label, r in ok if r.get("census")]
    st.markdown(f"##### {t('census.title')}")
    if not with_census:
        st.caption(t("census.none"))
        return
    labels = [label for label, _ in with_census]
    short = {label: (names or {}).get(label) or label for label in labels}
    grown = [i for i, (_, r) in enumerate(with_census) if r["census"].get("growth_bytes")]
    chosen = st.selectbox(
        t("census.pick"), labels, index=grown[0] if grown else 0, format_func=short.__getitem__, key=f"{key}.census"
    )
    if short[chosen] != chosen:
        st.caption(chosen)
    census = dict(with_census)[chosen]["census"]
    a, b = census.get("steps") or ["?", "?"]
    devices = sorted({g["device"] for g in census.get("groups") or []})
    st.caption(
        t("census.explain", a=a, b=b) + (" " + t("census.device", device=devices[0]) if len(devices) == 1 else "")
    )
    df = census_table(census)
    changed = sum(1 for g in census.get("groups") or [] if g["bytes_delta"] or g["count_delta"])

    def highlight(row):
        return ["background-color: rgba(228, 87, 86, 0.15)" if row.name < changed else "" for _ in row]

    st.dataframe(
        df.style.apply(highlight, axis=1),
        hide_index=True,
        width="stretch",
        column_config={
            t("census.col.bytes_delta"): st.column_config.TextColumn(width="small"),
            t("census.col.holders"): st.column_config.TextColumn(width="medium"),
        },
    )
