"""A model of PyTorch's CUDA caching allocator, replayed over a run's allocation trace: predicts `memory_reserved`.
Torch-free. The rules are those of c10/cuda/CUDACachingAllocator.cpp with default settings:

- every request is rounded up to a multiple of 512 bytes;
- requests up to 1 MiB come from the small pool, whose segments are 2 MiB; larger ones from the large pool,
  whose segments are 20 MiB for requests under 10 MiB and the request rounded up to 2 MiB above that;
- a request takes the smallest cached free block of its pool that fits (best fit), split when the rest is at
  least 512 bytes (small pool) or more than 1 MiB (large pool); otherwise a new segment is reserved;
- a freed block merges with free neighbours in its segment; segments stay reserved (until empty_cache).
`memory_allocated` counts whole blocks, so a request that takes a cached block without splitting it counts
the block's size (up to 1 MiB more than asked for in the large pool): the model's `allocated` does the same.
Scratch buffers that are not tensors are in the trace only where they were measured (experiments/estimate/workspaces.py).
"""

from __future__ import annotations

import bisect

from ..core import warm_up_layout
from ..core.units import MIB

SMALL = 1 * MIB
SMALL_SEGMENT = 2 * MIB
LARGE_SEGMENT = 20 * MIB
MIN_LARGE_ALLOC = 10 * MIB
ROUND_LARGE = 2 * MIB


def round_size(n: int) -> int:
    return 512 if n < 512 else -(-n // 512) * 512


def segment_size(n: int) -> int:
    if n <= SMALL:
        return SMALL_SEGMENT
    if n < MIN_LARGE_ALLOC:
        return LARGE_SEGMENT
    return -(-n // ROUND_LARGE) * ROUND_LARGE


class Block:
    __slots__ = ("segment", "offset", "size", "free", "prev", "next", "pool", "unmapped")

    def __init__(self, segment: int, offset: int, size: int, pool: str):
        self.segment, self.offset, self.size, self.pool = segment, offset, size, pool
        self.free, self.prev, self.next = True, None, None
        self.unmapped = 0  # expandable segments: bytes of this free block given back to the driver (allocator_limit.py)


class CachingAllocatorModel:
    def __init__(self, warm_up: bool = False):
        """`warm_up`: start as the engine's CUDA warm-up leaves the allocator (experiments/core/warm_up_layout.py);
        otherwise empty, as a fresh process's."""
        self.reserved = 0
        self.allocated = 0
        self.peak_reserved = 0
        self.peak_allocated = 0
        self._segments = 0
        self._free = {"small": [], "large": []}  # sorted (size, segment, offset, id(block)) -> block
        self._by_key: dict = {}
        self._live: dict[int, Block] = {}
        if warm_up:
            self._seed(warm_up_layout.SMALL_SEGMENTS)

    def _seed(self, segments) -> None:
        """The warm-up's small segments: their free blocks take a run's small tensors. Their workspaces are the
        baseline (in neither figure); their free bytes count as reserved, so that `reserved` is a real run's
        `memory_reserved()` less its baseline's allocated bytes, as the allocated peak is, and never below it."""
        for blocks in segments:
            self._segments += 1
            offset, prev = 0, None
            for size, allocated in blocks:
                block = Block(self._segments, offset, size, "small")
                block.prev = prev
                if prev is not None:
                    prev.next = block
                if allocated:
                    block.free = False
                else:
                    self._add_free(block)
                    self.reserved += size
                prev, offset = block, offset + size
        self.peak_reserved = self.reserved

    def _pool(self, n: int) -> str:
        return "small" if n <= SMALL else "large"

    def _add_free(self, block: Block) -> None:
        key = (block.size, block.segment, block.offset)
        bisect.insort(self._free[self._pool_of(block)], key)
        self._by_key[key] = block

    def _pool_of(self, block: Block) -> str:
        return block.pool

    def _remove_free(self, block: Block) -> None:
        key = (block.size, block.segment, block.offset)
        pool = self._free[self._pool_of(block)]
        pool.pop(bisect.bisect_left(pool, key))
        del self._by_key[key]

    def malloc(self, key: int, nbytes: int) -> None:
        if nbytes == 0:
            return  # the allocator hands out no block for an empty tensor
        size = round_size(nbytes)
        pool_name = self._pool(size)
        pool = self._free[pool_name]
        i = bisect.bisect_left(pool, (size, -1, -1))
        if i < len(pool):
            block = self._by_key[pool[i]]
            self._remove_free(block)
            self._remap(block, size)  # expandable segments: may map given-back pages again
        else:
            block = self._new_block(size, pool_name)
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        rest = block.size - size
        if rest >= 512 if pool_name == "small" else rest > SMALL:
            tail = Block(block.segment, block.offset + size, rest, pool_name)
            tail.prev, tail.next = block, block.next
            if block.next:
                block.next.prev = tail
            block.next = tail
            block.size = size
            tail.unmapped, block.unmapped = block.unmapped, 0  # what is still given back stays with the free part
            self._add_free(tail)
        block.free = False
        self._live[key] = block
        self.allocated += block.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)

    def _new_block(self, size: int, pool_name: str) -> Block:
        """No cached block fits: a new segment (cudaMalloc)."""
        seg = segment_size(size)
        self._segments += 1
        self.reserved += seg
        return Block(self._segments, 0, seg, pool_name)

    def _remap(self, block: Block, size: int) -> None:
        """A cached block is taken: nothing to do here (expandable segments map its given-back pages again)."""

    def free(self, key: int) -> None:
        block = self._live.pop(key, None)
        if block is None:
            return
        self.allocated -= block.size
        block.free = True
        for neighbour in (block.prev, block.next):
            if neighbour is not None and neighbour.free:
                self._remove_free(neighbour)
                if neighbour is block.prev:
                    neighbour.size += block.size
                    neighbour.unmapped += block.unmapped
                    neighbour.next = block.next
                    if block.next:
                        block.next.prev = neighbour
                    block = neighbour
                else:
                    block.size += neighbour.size
                    block.unmapped += neighbour.unmapped
                    block.next = neighbour.next
                    if neighbour.next:
                        neighbour.next.prev = block
        self._add_free(block)


class AllocationLog:
    """A listener of the replay's tracker (experiments/measure/tracker.py): the allocation trace this model replays.
    ("alloc", key, bytes asked for) / ("free", key, 0) in order, and ("mark", phase index, 0) where a phase ends.
    A kernel's scratch buffers are allocations freed at once (together: all made, then all freed); a storage resized in place is freed and allocated."""

    def __init__(self):
        self.events: list[tuple[str, int, int]] = []

    def allocated(self, tracker, key: int, rec, t, requested: int) -> None:
        self.events.append(("alloc", key, requested))

    def freed(self, tracker, key: int, rec) -> None:
        self.events.append(("free", key, 0))

    def resized(self, tracker, key: int, old: int, new: int) -> None:
        self.events += ([("free", key, 0)] if old else []) + ([("alloc", key, new)] if new else [])

    def held(self, tracker, items: list[tuple[int, int]]) -> None:
        self.events += [("alloc", key, nbytes) for key, nbytes in items] + [("free", key, 0) for key, _ in items]

    def phase_ended(self, tracker, name: str, step: int, micro, index: int) -> None:
        self.events.append(("mark", index, 0))


def replay_trace(events: list[tuple[str, int, int]], warm_up: bool = False) -> dict:
    """events: ("alloc", key, nbytes) / ("free", key, 0) in order; returns reserved/allocated figures. `warm_up`: the
    run follows the engine's warm-up (CachingAllocatorModel)."""
    model = CachingAllocatorModel(warm_up)
    marks = []
    since_mark = 0  # the highest allocated figure since the last phase boundary
    for kind, key, nbytes in events:
        if kind == "alloc":
            model.malloc(key, nbytes)
            since_mark = max(since_mark, model.allocated)
        elif kind == "free":
            model.free(key)
        else:  # a phase boundary: ("mark", index, 0)
            marks.append(
                {
                    "reserved_bytes": model.reserved,
                    "allocated_bytes": model.allocated,
                    "peak_allocated_bytes": since_mark,
                }
            )
            since_mark = model.allocated
    return {
        "reserved_bytes": model.reserved,
        "peak_reserved_bytes": model.peak_reserved,
        "peak_allocated_bytes": model.peak_allocated,
        "marks": marks,
    }
