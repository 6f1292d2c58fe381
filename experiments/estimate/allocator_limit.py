"""Does a run's allocation trace get through a memory limit? The caching allocator's own answer, replayed: a run on a
card fails when the allocator needs more memory from the driver than the card has left, not when the allocated peak
passes the card's size. Torch-free. The rules are c10/cuda/CUDACachingAllocator.cpp's malloc retry chain:

- a request takes a cached free block (best fit) if one is large enough;
- otherwise it asks the driver for a new segment (`allocator_model.segment_size`); past the limit (a card's memory, or
  `set_per_process_memory_fraction`'s share) the allocator first gives back every cached segment that holds no live
  block (`release_cached_blocks`; `release_available_cached_blocks` only acts with `max_split_size_mb` set) and tries
  again; still past it: out of memory, with the reserved-but-unallocated bytes in the message.
- With `expandable_segments:True` each pool is one segment that grows at its end in pages (2 MiB small, 20 MiB large:
  `large_segment_size`); a request that no free block holds maps only what the free block at the end lacks. Past the
  limit, the allocator unmaps the whole pages inside free blocks, and maps them again when a block there is used.

So with the default allocator a run can fail while much memory is reserved but free (a large request no cached
segment can hold), and with expandable segments it fails only near the allocated peak. Both give memory back only
when the card is full: `reserved_through` plays the trace against the card's own limit, so a run that gets through
because the allocator gave cached segments back is seen to get through (before, every answer assumed it never did,
and was up to half the batch too careful on the measured boundaries: docs/benchmarks/fits-boundary.md)."""

from __future__ import annotations

from ..core.units import MIB
from .allocator_model import SMALL_SEGMENT, Block, CachingAllocatorModel

LARGE_PAGE = 20 * MIB


class OutOfMemory(Exception):
    def __init__(self, request: int, reserved: int, allocated: int):
        super().__init__(f"out of memory: {request} B asked with {reserved} B reserved, {allocated} B allocated")
        self.request, self.reserved, self.allocated = request, reserved, allocated


class LimitedAllocator(CachingAllocatorModel):
    def __init__(self, limit: int, expandable: bool = False, release: bool = True):
        super().__init__()
        self.limit, self.expandable, self.release = limit, expandable, release
        self._head: dict[str, Block] = {}  # an expandable pool's first block: merges keep it, so it leads to the last

    # ------------------------------------------------------------------ the default allocator: whole segments

    def _new_block(self, size: int, pool_name: str) -> Block:
        if self.expandable:
            return self._grow(size, pool_name)
        block = super()._new_block(size, pool_name)
        if self.reserved <= self.limit:
            return block
        self.reserved -= block.size
        self._segments -= 1
        if not self.release:
            raise OutOfMemory(size, self.reserved, self.allocated)
        self._release_free_segments()
        block = super()._new_block(size, pool_name)
        if self.reserved > self.limit:
            self.reserved -= block.size
            raise OutOfMemory(size, self.reserved, self.allocated)
        return block

    def _release_free_segments(self) -> None:
        for pool in self._free.values():
            for key in list(pool):
                block = self._by_key[key]
                if block.prev is None and block.next is None:
                    self._remove_free(block)
                    self.reserved -= block.size

    # ------------------------------------------------------------------ expandable segments: pages

    def _page(self, pool_name: str) -> int:
        return SMALL_SEGMENT if pool_name == "small" else LARGE_PAGE

    def _map(self, nbytes: int, request: int, block: Block | None = None) -> None:
        """Maps `nbytes` more, and what `block` had given back; past the limit, first unmaps the free pages."""
        if self.reserved + nbytes + (block.unmapped if block else 0) > self.limit and self.release:
            self._unmap_free_pages()
            if self.reserved + nbytes + (block.unmapped if block else 0) > self.limit:
                raise OutOfMemory(request, self.reserved, self.allocated)
        self.reserved += nbytes + (block.unmapped if block else 0)
        if block is not None:
            block.unmapped = 0

    def _grow(self, size: int, pool_name: str) -> Block:
        page = self._page(pool_name)
        tail = self._head.get(pool_name)
        while tail is not None and tail.next is not None:
            tail = tail.next
        if tail is not None and tail.free:
            need = -(-(size - tail.size) // page) * page
            self._map(need, size, tail)
            self._remove_free(tail)
            tail.size += need
            return tail
        grown = -(-size // page) * page
        self._map(grown, size)
        offset = tail.offset + tail.size if tail is not None else 0
        block = Block(0 if pool_name == "small" else 1, offset, grown, pool_name)
        if tail is not None:
            tail.next, block.prev = block, tail
        else:
            self._head[pool_name] = block
        return block

    def _remap(self, block: Block, size: int) -> None:
        """A free block with given-back pages is taken for `size` bytes: the pages its front part lacks are mapped
        again; the rest stays given back with the part split off (allocator_model.malloc)."""
        if block.unmapped:
            mapped = block.size - block.unmapped
            need = min(block.unmapped, -(-max(0, size - mapped) // self._page(block.pool)) * self._page(block.pool))
            if need:
                rest, block.unmapped = block.unmapped - need, need
                self._map(0, size, block)
                block.unmapped = rest

    def _unmap_free_pages(self) -> None:
        for pool in self._free.values():
            for key in pool:
                block = self._by_key[key]
                page = self._page(block.pool)
                lo = -(-block.offset // page) * page
                hi = (block.offset + block.size) // page * page
                inner = max(0, hi - lo)
                if inner > block.unmapped:  # pages already given back (merged in from a neighbour) stay given back
                    self.reserved -= inner - block.unmapped
                    block.unmapped = inner


def _play(model: LimitedAllocator, events: list[tuple[str, int, int]]) -> tuple[OutOfMemory | None, int]:
    """Plays the trace through `model`: (the out-of-memory error that stopped it or None, phase marks passed)."""
    marks = 0
    try:
        for kind, key, nbytes in events:
            if kind == "alloc":
                model.malloc(key, nbytes)
            elif kind == "free":
                model.free(key)
            else:
                marks += 1
    except OutOfMemory as e:
        return e, marks
    return None, marks


def first_oom(
    events: list[tuple[str, int, int]], limit: int, expandable: bool = False, release: bool = True
) -> dict | None:
    """None if the trace runs within `limit` bytes of allocator memory; else where it fails: the request, the phase
    (index of marks passed), reserved and allocated at that moment. `release=False`: the allocator's giving back of
    cached memory before it fails is not counted on."""
    e, marks = _play(LimitedAllocator(limit, expandable, release), events)
    if e is None:
        return None
    return {
        "request_bytes": e.request,
        "phase_index": marks,
        "reserved_bytes": e.reserved,
        "allocated_bytes": e.allocated,
        "expandable": expandable,
    }


def reserved_through(events: list[tuple[str, int, int]], limit: int, expandable: bool = False) -> int | None:
    """The most the allocator reserves over the trace when the card leaves it `limit` bytes, giving cached memory back
    where it must (as the real one does only at that point); None where the run runs out of memory even so."""
    model = LimitedAllocator(limit, expandable, release=True)
    return None if _play(model, events)[0] else model.peak_reserved


def peak_reserved(events: list[tuple[str, int, int]], expandable: bool = False) -> int:
    """The most the allocator reserves over the trace with no limit (nothing is given back): with the default allocator
    a run fails past a limit exactly where this passes it when the allocator does not release cached segments."""
    model = LimitedAllocator(2**62, expandable, release=False)
    _play(model, events)
    return model.peak_reserved
