"""CUDA's reduction scratch on this GPU against experiments/estimate/reduce_scratch.py computed for its SMs.

Each case sums a tensor alone (twice; the second call is read) and takes the most the caching allocator held beyond
the input and the output: the partial sums and semaphores of Reduce.cuh, rounded as the allocator rounds.

    python benchmarks/reduce_scratch_check.py --out $OUT/reduce-scratch.json
    python benchmarks/reduce_scratch_check.py --report docs/benchmarks/reduce-scratch-h100.json   # any machine

The measurement starts from an empty cache, so each buffer opens a segment of its own; the caching allocator hands
over the whole segment where less than 1 MiB of it would be left (a segment is the request rounded up to 2 MiB,
20 MiB for requests of 1-10 MiB), and `handed` is what it then counts as allocated.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# (shape, dims, dtype, permutation of the stored tensor or None): bias gradients, 3-D sums, a full sum, a transposed
# input, a sum along the contiguous dimension, 16-bit inputs.
CASES = [
    ([16942, 768], [0], "float32", None),
    ([16942, 3072], [0], "float32", None),
    ([2048, 1024], [0], "bfloat16", None),
    ([8, 2048, 1024], [0, 1], "bfloat16", None),
    ([64, 197, 768], [0, 1], "float32", None),
    ([1_000_000], [0], "float32", None),
    ([4096, 4096], [], "bfloat16", None),
    ([768, 16942], [1], "float32", (1, 0)),
    ([16942, 768], [1], "float32", None),
    ([300, 50257], [0], "float16", None),
    ([7, 333, 129], [0, 2], "float32", None),
    ([32, 64, 56, 56], [0, 2, 3], "float32", None),
]


def handed(sizes) -> int:
    """What the caching allocator counts as allocated for these buffers made one after the other from an empty cache
    (the allocator model of experiments/estimate/allocator_model.py: its rounding, segment sizes and split rule)."""
    from experiments.estimate.allocator_model import CachingAllocatorModel

    model = CachingAllocatorModel()
    for i, n in enumerate(sizes):
        model.malloc(i, n)
    return model.allocated


def report(path: str) -> None:
    data = json.loads(Path(path).read_text())
    from experiments.estimate.reduce_scratch import sum_scratch

    equal = 0
    for r in data["cases"]:
        x_shape = [r["shape"][p] for p in r["perm"]] if r["perm"] else r["shape"]
        strides = [1] * len(x_shape)
        for i in range(len(x_shape) - 2, -1, -1):
            strides[i] = strides[i + 1] * x_shape[i + 1]
        shape = [x_shape[p] for p in r["perm"]] if r["perm"] else x_shape  # the permuted view
        strides = [strides[p] for p in r["perm"]] if r["perm"] else strides
        n = {"float32": 4, "bfloat16": 2, "float16": 2}[r["dtype"]]
        gpu = ((data["sms"], data["threads_per_sm"]),)
        got = handed(sum_scratch(shape, strides, n, r["dims"], n, True, on=gpu) or ())
        equal += got == r["measured"]
        print(
            f"{str(r['shape']):22} {str(r['dims']):10} {r['dtype']:9} measured {r['measured']:>12,} handed {got:>12,}"
        )
    print(
        f"{data['device']} ({data['sms']} SMs, {data['threads_per_sm']} threads each): {equal} of "
        f"{len(data['cases'])} equal"
    )


def main() -> None:
    import torch

    from experiments.estimate.allocator_model import round_size
    from experiments.estimate.reduce_scratch import sum_scratch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    ap.add_argument("--report", help="a file this script wrote: compare it again, without a GPU")
    args = ap.parse_args()
    if args.report:
        return report(args.report)
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    gpu = (props.multi_processor_count, props.max_threads_per_multi_processor)
    rows = []
    for shape, dims, dtype, perm in CASES:
        dt = getattr(torch, dtype)
        x = torch.randn([shape[p] for p in perm] if perm else shape, dtype=dt, device=dev)
        x = x.permute(*perm) if perm else x
        for _ in range(2):
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(dev)
            before = torch.cuda.memory_allocated(dev)
            out = x.sum(dims)
            torch.cuda.synchronize()
            held = torch.cuda.max_memory_allocated(dev) - before - round_size(out.untyped_storage().nbytes())
            del out
        got = sum_scratch(list(x.shape), list(x.stride()), x.element_size(), dims, x.element_size(), True, on=(gpu,))
        computed = None if got is None else handed(got)
        rows.append(
            {"shape": shape, "dims": dims, "dtype": dtype, "perm": perm, "measured": held, "computed": computed}
        )
        print(f"{str(shape):22} {str(dims):10} {dtype:9} {str(perm):7} measured {held:>12,} computed {computed}")
    out = {"device": props.name, "sms": gpu[0], "threads_per_sm": gpu[1], "torch": torch.__version__, "cases": rows}
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(sum(r["measured"] == r["computed"] for r in rows), "of", len(rows), "equal")


if __name__ == "__main__":
    main()
