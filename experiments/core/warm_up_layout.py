"""What the engine's CUDA warm-up (experiments/measure/device.py `warm_up_cuda`) leaves in the caching allocator's small
pool, read with torch.cuda.memory_snapshot() on an NVIDIA H100 (torch 2.11; docs/benchmarks/reserved-offset-h100.json).

Each cuBLASLt workspace (1 MiB: one for the forward thread, one for autograd's backward thread) is a small-pool
block, and each took a 2 MiB segment of its own; the rest of those segments is free and a run's small tensors go
there before the allocator reserves a new segment. The estimate's reserved figure is a run's `memory_reserved()` less
its baseline's allocated bytes (as its peak is `max_memory_allocated()` less them): the new segments and these free
bytes. Replayed from an empty pool instead, four of five small configurations reserved one 2 MiB segment more than
the H100 did. Torch-free."""

from __future__ import annotations

# Each segment's blocks in address order: (bytes, allocated).
SMALL_SEGMENTS = (
    ((1048576, True), (1048576, False)),
    ((66560, False), (1048576, True), (982016, False)),
)


def free_bytes() -> int:
    """The warm-up's reserved but unallocated bytes (what `memory_reserved() - memory_allocated()` reads after it)."""
    return sum(size for segment in SMALL_SEGMENTS for size, allocated in segment if not allocated)
