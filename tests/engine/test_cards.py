"""Cards by name and what a process holds outside the allocator: the stated overhead is the one the H200
recordings show (recomputed here from them, not trusted), and every card's figure is where its source says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.core.cards import CARDS, allocator_budget, card, overhead, overhead_bytes
from experiments.core.units import MIB

ROOT = Path(__file__).resolve().parents[2]


def _outside_allocator_on_the_h200() -> list[int]:
    out = []
    for path in sorted((ROOT / "recorded" / "h200").glob("*.json")):
        r = json.loads(path.read_text())["result"]
        d = r.get("driver")
        if isinstance(d, dict) and r.get("phases"):
            out.append(d["total_bytes"] - d["free_bytes"] - r["phases"][-1]["reserved_bytes"] + r["baseline_bytes"])
    return out


def test_the_hopper_overhead_covers_every_recorded_h200_run_and_not_by_much():
    seen = _outside_allocator_on_the_h200()
    assert len(seen) >= 50
    stated = overhead_bytes("hopper")
    assert max(seen) <= stated <= max(seen) + 8 * MIB, (max(seen) / MIB, stated / MIB)


def test_an_architecture_not_measured_says_whose_figure_it_takes():
    o = overhead("ada")
    assert o["arch"] == "hopper" and o["assumed_for"] == "ada" and o["bytes"] == overhead_bytes("hopper")
    assert "assumed_for" not in overhead("hopper")


def test_cards_have_names_in_both_languages_sources_and_whole_mib():
    sources = json.loads((ROOT / "experiments" / "core" / "cards.json").read_text())["sources"]
    ids = [c["id"] for c in CARDS]
    assert len(ids) == len(set(ids)) >= 8
    for c in CARDS:
        assert c["name"]["en"] and c["name"]["zh"] and c["source"] in sources
        assert 6 * 2**30 < c["total_bytes"] < 160 * 2**30
        assert c["source"] == "measured" or c["total_bytes"] % MIB == 0  # quoted GiB to whole MiB
    h200 = card("h200-141gb")
    assert h200["source"] == "measured"
    recorded = json.loads((ROOT / "recorded" / "h200" / "monitoring-preset.json").read_text())["result"]
    assert h200["total_bytes"] == recorded["driver"]["total_bytes"]


def test_unknown_card_names_the_field_and_the_known_ones():
    with pytest.raises(KeyError, match="card: unknown 'rtx-9999'.*h200-141gb"):
        card("rtx-9999")


def test_the_budget_is_the_card_less_what_is_held_outside():
    assert allocator_budget(24 * 2**30, 840 * MIB) == 24 * 2**30 - 840 * MIB
    assert allocator_budget(100, 200) == 0
