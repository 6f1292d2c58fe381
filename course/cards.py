"""Cards by name and what a process holds outside the allocator, for the pages (experiments/core/cards.py)."""

from experiments.core.cards import CARDS, card, overhead, overhead_bytes

__all__ = ["CARDS", "card", "overhead", "overhead_bytes"]
