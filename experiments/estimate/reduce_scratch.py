"""The scratch buffer of CUDA's reduction kernel, computed as PyTorch computes it (no GPU needed).

A sum that splits each output over several thread blocks (a bias gradient summed over a large batch: `grad.sum(0)` of
a [tokens, features] tensor) takes a buffer for the blocks' partial sums and one int per output block (semaphores)
from the caching allocator, held while the kernel runs. Its size follows from the tensor's shape and strides and from
two properties of the GPU: the number of streaming multiprocessors and the most threads resident on one. On an NVIDIA
H100 a ViT-B/16 step in fp32 at batch 86 peaks during such a sum, 104 MB above the tensors (benchmarks/op_memory.py).

This mirrors ATen's TensorIterator (reorder_dimensions, coalesce_dimensions) and Reduce.cuh's setReduceConfig and
ReduceConfig::global_memory_size / semaphore_size as torch 2.11 has them (checked on its CUDA build, on an H100).
Without a GPU the buffer is computed for every card of experiments/core/cards.json and the largest taken: it grows
with the GPU's resident threads, so the figure is the card list's largest GPU's (exact there) and an upper bound on a
smaller one. A reduction this does not cover (complex
dtypes, tensors past 32-bit indexing, which ATen splits) returns None and stays for the device to measure.
"""

from __future__ import annotations

import functools
import math

from ..core.cards import CARDS

MAX_NUM_THREADS = 512  # mnt_wrapper<T>::MAX_NUM_THREADS for every real dtype (complex double: 256, not covered)
MIN_VALUES_PER_THREAD, MAX_VALUES_PER_THREAD = 16, 256
WARP = 32
INT32_MAX = 2**31 - 1


def _div_up(a: int, b: int) -> int:
    return -(-a // b)


def _last_pow2(dim: int, cap: int) -> int:
    """`dim < cap ? last_pow2(dim) : cap` for a power-of-two cap."""
    while cap > 1 and dim < cap:
        cap //= 2
    return cap


@functools.cache
def gpus() -> tuple[tuple[int, int], ...]:
    """(SMs, resident threads per SM) of every card the lab knows that gives them (the H200's where none does)."""
    known = {(int(c["sms"]), int(c["threads_per_sm"])) for c in CARDS if c.get("sms") and c.get("threads_per_sm")}
    return tuple(sorted(known)) or ((132, 2048),)


def _layout(shape, strides, itemsize: int, out_itemsize: int, dims) -> tuple[list[int], list[int], list[int]] | None:
    """TensorIterator's view of a reduction: (shape, input strides, output strides) in bytes, fastest dimension first,
    reduced dimensions in front, adjacent dimensions coalesced."""
    nd = len(shape)
    reduced = set(dims) if dims else set(range(nd))
    out_strides, acc = [0] * nd, out_itemsize
    for d in reversed(range(nd)):  # the output: contiguous over the kept dimensions, stride 0 on the reduced ones
        if d not in reduced:
            out_strides[d] = acc
            acc *= shape[d]
    ops = [out_strides, [s * itemsize for s in strides]]

    def should_swap(d0: int, d1: int) -> int:
        for i, st in enumerate(ops):
            s0, s1 = st[d0], st[d1]
            if i == 0 and (s0 == 0) != (s1 == 0):
                return 1 if s1 == 0 else -1  # reduced dimensions move to the front
            if s0 == 0 or s1 == 0:
                continue
            if s0 != s1:
                return -1 if s0 < s1 else 1
            if shape[d0] > shape[d1]:
                return 1
        return 0

    perm = list(reversed(range(nd)))
    for i in range(1, nd):  # ATen's insertion sort with ambiguous comparisons
        d1 = i
        for d0 in range(i - 1, -1, -1):
            c = should_swap(perm[d0], perm[d1])
            if c > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif c < 0:
                break
    sh = [shape[p] for p in perm]
    st = [[s[p] for p in perm] for s in ops]
    prev = 0
    for d in range(1, nd):
        if sh[prev] == 1 or sh[d] == 1 or all(sh[prev] * s[prev] == s[d] for s in st):
            if sh[prev] == 1:
                for s in st:
                    s[prev] = s[d]
            sh[prev] *= sh[d]
        else:
            prev += 1
            if prev != d:
                for s in st:
                    s[prev] = s[d]
                sh[prev] = sh[d]
    n = prev + 1 if nd else 0
    return sh[:n], st[1][:n], st[0][:n]


def _output_vec_size(shape, in_strides, out_index: int, itemsize: int) -> int:
    vec = 4  # outputs come from the caching allocator, aligned to 512 bytes: the data pointer never lowers it

    def update(n: int, unit: int) -> None:
        nonlocal vec
        while vec > 1 and n % (vec * unit):
            vec //= 2

    update(shape[out_index], 1)
    for j, s in enumerate(in_strides):
        if j != out_index:
            update(s, itemsize)
    return vec


def _buffers(
    shape, in_strides, out_strides, itemsize: int, acc_size: int, sms: int, threads_per_sm: int, vec16: int = 8
):
    nd = len(shape)
    n_reduce = sum(1 for s in out_strides if s == 0)
    numel = math.prod(shape)
    if numel == 0:
        return ()
    num_outputs = numel // math.prod(shape[:n_reduce]) if n_reduce else numel
    inputs_per_output = numel // num_outputs
    if nd:
        fastest = n_reduce == nd or in_strides[0] < in_strides[n_reduce]
        dim0, dim1 = (inputs_per_output, num_outputs) if fastest else (num_outputs, inputs_per_output)
        moving = in_strides[0] if fastest else in_strides[n_reduce]
    else:
        fastest, dim0, dim1, moving = True, 1, 1, itemsize
    vec_out = 1
    if moving == itemsize:
        if fastest and dim0 >= 128 and n_reduce == 1:
            dim0 //= vec16 if itemsize == 2 else 4  # input_vec_size: a sum's 8 for 16-bit inputs, a mean's 4; vt0 = 4
        elif not fastest:
            vec_out = _output_vec_size(shape, in_strides, n_reduce, itemsize)
            dim0 //= vec_out
    max_threads = MAX_NUM_THREADS // vec_out
    d0, d1 = _last_pow2(dim0, max_threads), _last_pow2(dim1, max_threads)
    width = min(d0, WARP)
    height = min(d1, max_threads // width)
    width = min(d0, max_threads // height)
    threads = width * height
    step_in = step_out = 1
    mult_in = [0, 0, 0]
    if nd == 0 or fastest:
        mult_in[0], step_in = step_in, step_in * width
    else:
        step_out *= width
    if _div_up(inputs_per_output, step_in) >= min(height * 16, MAX_VALUES_PER_THREAD):
        mult_in[1], step_in = step_in, step_in * height
    else:
        step_out *= height
    target = sms * (threads_per_sm // threads)
    grid = _div_up(num_outputs // vec_out, step_out)
    per_thread = _div_up(inputs_per_output, step_in)
    ctas = 1
    if mult_in[1] and per_thread >= MAX_VALUES_PER_THREAD and grid <= target:
        c1, c2 = _div_up(target, grid), _div_up(per_thread, MIN_VALUES_PER_THREAD)
        ctas = max(_div_up(per_thread, MAX_VALUES_PER_THREAD), min(c1, c2))
        if ctas > 1:
            mult_in[2] = step_in
    if not mult_in[2]:
        return ()
    size = acc_size * num_outputs * ctas
    if not mult_in[0]:
        size *= width * vec_out
    return (size, 4 * grid)


class Buffer(int):
    """A scratch buffer's size in bytes that keeps the kernel call it was computed for (`spec`: the first arguments of
    `kernel`, a shape and its strides first; `index`: which of the call's buffers). A trace drawn at another batch
    (batch_line.py) computes it again from the shape there: the buffer grows with the batch only until every SM has
    its share, so it is not on a line in the batch as the tensors are. `kernel`: sum_scratch (a sum's) or
    norm_scratch.layer_norm_scratch (layer norm's backward)."""

    spec: tuple
    index: int
    keeps_place = True  # the tracker passes it on at 0 bytes too (experiments/measure/tracker.py hold_scratch)

    def __new__(cls, nbytes: int, spec: tuple, index: int, kernel=None):
        self = super().__new__(cls, nbytes)
        self.spec, self.index, self.kernel = spec, index, kernel or sum_scratch
        return self

    def __reduce__(self):
        return (Buffer, (int(self), self.spec, self.index, self.kernel))


def buffers(shape, strides, itemsize: int, dims, out_itemsize: int, floating: bool, kernel=None) -> tuple[Buffer, ...]:
    """The buffers of `kernel` (sum_scratch, or mean_scratch) on the card list's largest GPU, each a Buffer that knows
    its reduction. A reduction that does not split gives its two buffers as 0 bytes (the allocator hands out nothing
    for them): a trace keeps its place, so that the traces of batches where it splits and where it does not make the
    same events (batch_line.py). () where this does not know the kernel."""
    spec = (tuple(int(n) for n in shape), tuple(int(n) for n in strides), itemsize, tuple(dims), out_itemsize, floating)
    kernel = kernel or sum_scratch
    found = kernel(*spec)
    if found is None:
        return ()
    return tuple(Buffer(n, spec, i, kernel) for i, n in enumerate(found or (0, 0)))


def sum_scratch(
    shape, strides, itemsize: int, dims, out_itemsize: int, floating: bool, on=None, vec16: int = 8
) -> tuple[int, ...] | None:
    """The scratch allocations (partial sums, semaphores) of CUDA's sum over `dims` of a tensor, in the order the
    kernel makes them: on the card list's largest GPU, or on the GPUs `on` ((SMs, threads per SM), ...). None where
    this does not know the kernel. `vec16`: how many 16-bit inputs a thread reads at once (a sum's 8)."""
    dims = tuple(int(d) for d in dims)
    on = tuple(on) if on else gpus()
    shape, strides = tuple(int(n) for n in shape), tuple(int(n) for n in strides)
    return _sum_scratch(shape, strides, itemsize, dims, out_itemsize, floating, on, vec16)


def mean_scratch(
    shape, strides, itemsize: int, dims, out_itemsize: int, floating: bool, on=None
) -> tuple[int, ...] | None:
    """As sum_scratch, for CUDA's mean: the same reduction, except that it reads 16-bit inputs 4 at a time, not 8
    (ReduceMomentKernel.cu's mean_kernel_impl takes gpu_reduce_kernel's default input_vec_size)."""
    return sum_scratch(shape, strides, itemsize, dims, out_itemsize, floating, on, vec16=4)


@functools.lru_cache(maxsize=65536)  # a search draws the same sums at each batch it tries (batch_line.py)
def _sum_scratch(shape, strides, itemsize, dims, out_itemsize, floating, on, vec16=8) -> tuple[int, ...] | None:
    last_byte = 1 + sum((n - 1) * s * itemsize for n, s in zip(shape, strides, strict=True))
    if math.prod(shape) > INT32_MAX or last_byte > INT32_MAX:
        return None  # ATen splits the iterator (and accumulates in a buffer of its own): not covered
    dims = [d % len(shape) for d in dims] if shape else []
    acc = 4 if floating and itemsize <= 4 else 8  # float accumulates 16-bit and 32-bit floats; int64 / double else
    sh, ins, outs = _layout(shape, strides, itemsize, out_itemsize, dims)
    found = [_buffers(sh, ins, outs, itemsize, acc, sms, tps, vec16) for sms, tps in on]
    return max(found, key=sum)
