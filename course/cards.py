"""Cards by name, what a process holds outside the allocator, and the share of the rest "What fits" keeps to spare,
for the pages (experiments/core/cards.py, experiments/core/capacity.py)."""

from experiments.core.capacity import RESERVED_MARGIN
from experiments.core.cards import CARDS, card, overhead, overhead_bytes

__all__ = ["CARDS", "RESERVED_MARGIN", "card", "overhead", "overhead_bytes"]
