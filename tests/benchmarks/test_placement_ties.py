"""benchmarks/placement_ties.py on a hand-made allocator history: one tie, taken at the lowest address."""

from __future__ import annotations

from benchmarks.placement_ties import ties

MIB = 2**20


def _history(first: int, second: int) -> list:
    """Two 14 MiB segments made at `first` then `second`, both freed; a 14 MiB request then takes the lower one."""
    taken = min(first, second)
    return [
        ["segment_alloc", 14 * MIB, first, []],
        ["alloc", 14 * MIB, first, []],
        ["segment_alloc", 14 * MIB, second, []],
        ["alloc", 14 * MIB, second, []],
        ["free_completed", 14 * MIB, first, []],
        ["free_completed", 14 * MIB, second, []],
        ["alloc", 14 * MIB, taken, []],
    ]


def test_a_tie_is_counted_with_the_rules_that_pick_the_block_taken():
    down = ties(_history(0x7F0000000000, 0x7E0000000000))  # the newer segment lies below: the driver's usual order
    assert down["ties"] == 1 and down["lowest_address"] == 1
    assert down["newest_first"] == 1 and down["oldest_first"] == 0
    assert down["new_large_segments_below_the_last"] == "1 of 1"
    up = ties(_history(0x7E0000000000, 0x7F0000000000))
    assert up["oldest_first"] == 1 and up["newest_first"] == 0 and up["new_large_segments_below_the_last"] == "0 of 1"


def test_a_new_segment_is_no_tie():
    assert ties(_history(0x7F0000000000, 0x7E0000000000)[:4])["ties"] == 0
