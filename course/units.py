"""Bytes as a learner reads them, for the course and the app: the engine's one definition (experiments/core/units.py,
torch-free), so that a page, a graded sentence and the CLI word a size the same way."""

from experiments.core.units import GIB, MIB, fmt_bytes

__all__ = ["GIB", "MIB", "fmt_bytes"]
