"""The table of kernels' scratch memory the worker measured on its GPU (experiments/estimate/workspaces.py writes it),
read without torch: the web server passes it to the estimates it asks for."""

from __future__ import annotations

import json
from pathlib import Path


def sizes(transient) -> tuple[int, ...]:
    """A table's entry as scratch allocations: a tuple of sizes, or one number (tables written before)."""
    if isinstance(transient, (int, float)):
        return (int(transient),) if transient > 0 else ()
    return tuple(int(n) for n in transient)


def load(path: Path) -> dict[str, tuple[int, ...]]:
    try:
        return {k: sizes(v) for k, v in json.loads(path.read_text()).items()}
    except (OSError, ValueError, AttributeError, TypeError):
        return {}
