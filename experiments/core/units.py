"""Bytes as the engine counts them and a learner reads them. Torch-free: the engine's messages, the CLI's tables, the
app's tables and charts and the graded exercises' sentences word sizes with these."""

from __future__ import annotations

KIB = 2**10
MIB = 2**20
GIB = 2**30


def fmt_bytes(value) -> str:
    """In the largest binary unit it reaches, two decimals ("1.50 MiB"); "—" for no value."""
    if value is None:
        return "—"
    value = float(value)
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if abs(value) >= size:
            return f"{value / size:,.2f} {unit}"
    return f"{value:,.0f} B"


def fmt_mib(nbytes: float) -> str:
    """In MiB whatever the size, two decimals ("0.25 MiB"): a budget and what it was asked for, side by side."""
    return f"{nbytes / MIB:.2f} MiB"


def fmt_gib(nbytes: float) -> str:
    """In GiB whatever the size, two decimals: a run's estimated peak against a machine's memory."""
    return f"{nbytes / GIB:.2f} GiB"
