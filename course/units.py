"""Bytes as a learner reads them (MIB, fmt_bytes). Neither torch nor Streamlit: the app's tables
and charts and the graded exercises' sentences (course/grading) word sizes the same way."""

from __future__ import annotations

MIB = 2**20


def fmt_bytes(value) -> str:
    if value is None:
        return "—"
    value = float(value)
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(value) >= size:
            return f"{value / size:,.2f} {unit}"
    return f"{value:,.0f} B"
