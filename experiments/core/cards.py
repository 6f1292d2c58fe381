"""Cards by name (experiments/core/cards.json): the memory a process sees on each, and what it holds outside PyTorch's
allocator. Torch-free. "What fits on a card" is judged against `total_bytes - overhead_bytes(card)`: the allocator
may reserve that much, and the allocator's own model (experiments/estimate/allocator_limit.py) says whether a run's
allocations get through it."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from .units import GIB

PATH = Path(__file__).with_name("cards.json")


@lru_cache(maxsize=1)
def _data() -> dict:
    data = json.loads(PATH.read_text(encoding="utf-8"))
    for card in data["cards"]:
        # Quoted as GiB with two decimals: to whole MiB, as the driver reports it.
        card.setdefault("total_bytes", round(card.get("total_gib", 0) * 1024) * (GIB // 1024))
    return data


CARDS: list[dict] = _data()["cards"]


def card(card_id: str) -> dict:
    """The card named `card_id`; a KeyError naming the known ones otherwise."""
    found = next((c for c in CARDS if c["id"] == card_id), None)
    if found is None:
        raise KeyError(f"card: unknown {card_id!r}; known: {', '.join(c['id'] for c in CARDS)}")
    return found


def overhead(arch: str | None = None) -> dict:
    """{"bytes", "source", "arch"}: what a training process holds outside the allocator on this architecture (the
    CUDA context as it grows while kernels load, cuBLAS's handles and the workspaces made before the first tensor);
    an architecture not measured takes the measured one's figure, and says so."""
    table, default = _data()["overhead"], _data()["default_overhead"]
    if arch in table:
        return dict(table[arch], arch=arch)
    return dict(table[default], arch=default, assumed_for=arch)


def overhead_bytes(card_or_arch: dict | str | None = None) -> int:
    arch = card_or_arch.get("arch") if isinstance(card_or_arch, dict) else card_or_arch
    return int(overhead(arch)["bytes"])


def allocator_budget(total_bytes: int, outside_bytes: int) -> int:
    """What the caching allocator may reserve on a card of `total_bytes` with `outside_bytes` held outside it."""
    return max(0, int(total_bytes) - int(outside_bytes))
