"""The scratch memory of CUDA's layer-norm backward, computed as PyTorch's kernel allocates it (no GPU needed).

For the weight's and the bias's gradients ATen's layer_norm_kernel.cu (LaunchGammaBetaBackwardCUDAKernel, torch 2.11)
takes a two-pass path when there are many rows and few features: M > 64 x 1024 rows and N / 32 < SMs / 2 features. Its
first kernel writes one partial sum per block of 32 rows into a buffer of [min(32768 // ceil(N / 32), ceil(M / 32)), N]
elements in the weight's dtype, one for the weight and one for the bias, and a `sum(0)` of each gives the gradient; that
sum splits over thread blocks in turn and takes reduce_scratch's buffers. A ViT-B/16 step on an NVIDIA H100 at batch
802 (AMP bf16, M = 157,994 tokens, N = 768) holds two buffers of 4,193,280 bytes and a sum's 8,650,752 and 24 in each
layer norm's backward (docs/benchmarks/trial-history-h100/). A replay on fake tensors sees none of them: the estimate
adds them where the device has not measured the op (experiments/estimate/workspaces.py measures it where it has).

Without a GPU, as reduce_scratch: computed for every card of experiments/core/cards.json, the largest taken.
"""

from __future__ import annotations

import functools
import math

from .reduce_scratch import Buffer, gpus, sum_scratch

ROWS_PER_BLOCK = 32  # rows_per_block_y of the two-pass path
BLOCK_X = 32  # block_dim_x (CUDA; ROCm's 64 is not covered)
MAX_GRID = 64 * 1024 // 2
MIN_ROWS = 64 * 1024


def layer_norm_scratch(shape, strides, itemsize: int, weight: bool, bias: bool, on=None) -> tuple[int, ...]:
    """The backward's scratch allocations for M rows of N features, `shape` = (M, N) (`strides`: its (N, 1), so a
    trace drawn at another batch moves it as it moves a sum's): the weight's partial sums, the bias's, and the sum's
    partial sums and semaphores, held while the op runs (the bias's sum reuses the weight's freed buffer); 0 where a
    buffer is not made. `itemsize`: the weight's. On the card list's largest GPU, or on the GPUs `on`."""
    on = tuple(on) if on else gpus()
    return _scratch(tuple(int(n) for n in shape), itemsize, bool(weight), bool(bias), on)


@functools.lru_cache(maxsize=65536)
def _scratch(shape, itemsize, weight, bias, on) -> tuple[int, ...]:
    m, n = shape
    found = [(0, 0, 0, 0)]
    for sms, threads in on:
        if not (m > MIN_ROWS and n // BLOCK_X < sms // 2) or not (weight or bias):
            continue
        blocks_x = -(-n // BLOCK_X)
        rows = min(MAX_GRID // blocks_x, -(-m // ROWS_PER_BLOCK))
        part = rows * n * itemsize
        summed = sum_scratch((rows, n), (n, 1), itemsize, (0,), itemsize, True, on=((sms, threads),)) or (0, 0)
        found.append((part if weight else 0, part if bias else 0, *summed))
    return max(found, key=sum)


def buffers(x_shape, normalized: int, itemsize: int, weight: bool, bias: bool) -> tuple[Buffer, ...]:
    """layer_norm_scratch's buffers for an input of `x_shape` normalised over its last `normalized` dimensions, each a
    Buffer that knows its call (drawn again at another batch: experiments/estimate/batch_line.py). Four every time,
    0 bytes where the kernel takes the one-pass path, so traces keep their places across batches."""
    cut = len(x_shape) - normalized
    m, n = math.prod(x_shape[:cut]), math.prod(x_shape[cut:])
    spec = ((m, n), (n, 1), itemsize, bool(weight), bool(bias))
    return tuple(Buffer(b, spec, i, layer_norm_scratch) for i, b in enumerate(layer_norm_scratch(*spec)))
