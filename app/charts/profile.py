"""The profiler's operator table of one step, sorted by self device memory (self CPU memory in CPU mode)."""

from __future__ import annotations

import pandas as pd

from app.i18n import t
from course.units import MIB


def table(rows: list[dict], device_type: str) -> tuple[pd.DataFrame, str]:
    """(the table, the name of the column it is sorted by)."""
    df = pd.DataFrame(rows)
    sort_key = "self_device_memory_bytes" if device_type == "cuda" else "self_cpu_memory_bytes"
    if df.empty:
        return df, sort_key
    if sort_key in df:
        df = df.sort_values(sort_key, ascending=False, key=lambda s: s.fillna(float("-inf")))
    # Device columns are all zeros without a GPU: hide them rather than show a column of meaningless zeros.
    keep = [c for c in df.columns if not df[c].isna().all() and (device_type == "cuda" or "device" not in c)]
    # The operator and the sort column first: on a projector's half-width column the rest may scroll out of view.
    first = [c for c in ("name", sort_key) if c in keep]
    df = df[first + [c for c in keep if c not in first]].copy()
    # MiB, as the rest of the app writes memory (signed: a self memory is negative where an operator frees).
    for c in df.columns:
        if c.endswith("_bytes"):
            df[c] = (df[c] / MIB).round(2)
    return df.rename(columns={c: t("prof." + c, default=c) for c in df.columns}), t(
        "prof." + sort_key, default=sort_key
    )
