"""CUDA's reduction scratch computed without a GPU (experiments/estimate/reduce_scratch.py), against what the GPUs
measured: the NVIDIA H200's workspace table (every sum op the lab's recorded runs made, measured alone on the device)
and the op-by-op run of a ViT-B/16 step on an NVIDIA H100 (benchmarks/op_memory.py), both 132 SMs, 2048 threads each."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from experiments.core.cards import CARDS
from experiments.core.workspace_table import sizes
from experiments.estimate import reduce_scratch
from experiments.estimate.allocator_model import round_size
from experiments.estimate.reduce_scratch import sum_scratch

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "docs" / "benchmarks"
ITEMSIZE = {"bfloat16": 2, "float16": 2, "float32": 4}
SMALL_SIZE = 1 << 20  # the allocator hands a cached block over whole when at most this much of it would be left


def _contiguous(shape) -> list[int]:
    return [math.prod(shape[i + 1 :]) for i in range(len(shape))]


def _h200_sums() -> list[tuple[list[int], str, list[int], int]]:
    table = json.loads((BENCH / "workspaces-h200.json").read_text())
    out = []
    for sig, measured in table.items():
        spec = json.loads(sig)
        if spec["op"] == "sum":
            x = spec["args"][0]
            out.append((x["shape"], x["dtype"], spec["args"][1], sum(sizes(measured))))
    return out


def test_every_sum_the_h200_measured_is_computed():
    sums = _h200_sums()
    assert len(sums) >= 100
    exact = 0
    for shape, dtype, dims, measured in sums:
        n = ITEMSIZE[dtype]
        got = sum_scratch(shape, _contiguous(shape), n, dims, n, True)
        requested = sum(round_size(b) for b in got)
        # The probe ran after other ops: a cached block up to 1 MiB larger than the request is given whole.
        assert 0 <= measured - requested <= SMALL_SIZE, (shape, dtype, measured, got)
        exact += measured == requested
    assert exact >= 0.9 * len(sums), (exact, len(sums))


def test_the_sums_that_held_a_vit_step_peak_on_the_h100():
    for name in ("opmem_vit_fp32_b86.json", "opmem_vit_fp32_l2_b86.json"):
        r = json.loads((BENCH / "op-memory-h100" / name).read_text())
        sums = [s for s in r["scratch"] if s["op"][0] == "sum.dim_IntList"]
        assert len(sums) >= 2
        for s in sums:
            shape, dtype, _contig = s["op"][1][0]
            got = sum_scratch(shape, _contiguous(shape), ITEMSIZE[dtype], [0], ITEMSIZE[dtype], True)
            # The most any call held: a cached block a little larger may have been given whole (see above).
            assert 0 <= s["max_bytes"] - sum(round_size(b) for b in got) <= SMALL_SIZE, (name, shape)
        # The step's peak is in one of them, with exactly the computed buffers beside the tensors.
        peak = r["peak_at"]
        assert peak["op"] == "sum.dim_IntList"
        (shape, dtype, _contig), n = peak["args"][0], ITEMSIZE[peak["args"][0][1]]
        assert sum(round_size(b) for b in sum_scratch(shape, _contiguous(shape), n, [0], n, True)) == peak["scratch"]


def test_a_bias_gradient_by_hand():
    """[2048, 1024] bf16 summed over dim 0, following ATen: outputs vectorised by 4 (256 columns of 4), a block of
    32 x 4 threads, 128 threads so 16 blocks per SM and 132 x 16 = 2112 blocks wanted; 8 column blocks, 512 values per
    thread: 32 blocks per output (min(2112 / 8, 512 / 16)). Partial sums: 4 bytes x 1024 outputs x 32 x 32 lanes x 4."""
    assert sum_scratch([2048, 1024], [1024, 1], 2, [0], 2, True) == (4 * 1024 * 32 * 32 * 4, 4 * 8)


def test_a_smaller_gpu_takes_less_and_the_card_lists_largest_is_used():
    full = sum_scratch([16942, 768], [768, 1], 4, [0], 4, True)
    small = sum_scratch([16942, 768], [768, 1], 4, [0], 4, True, on=((28, 1536),))  # an RTX 3060
    assert small[0] < full[0] == sum_scratch([16942, 768], [768, 1], 4, [0], 4, True, on=((132, 2048),))[0]
    assert (132, 2048) in reduce_scratch.gpus()
    assert max(c["sms"] * c["threads_per_sm"] for c in CARDS) == 132 * 2048


@pytest.mark.parametrize(
    ("shape", "strides", "dims", "why"),
    [
        ([512, 768], [768, 1], [0], "few rows: one block per output column, no partial sums"),
        ([16942, 768], [768, 1], [1], "along the contiguous dimension: each output in one block"),
    ],
)
def test_no_buffer_where_no_block_shares_an_output(shape, strides, dims, why):
    assert sum_scratch(shape, strides, 4, dims, 4, True) == (), why


def test_a_reduction_past_32_bit_indexing_is_left_to_the_device():
    assert sum_scratch([70000, 8192], [8192, 1], 4, [0], 4, True) is None


def test_an_h100_measured_what_it_computes_for_its_own_sms(capsys):
    """benchmarks/reduce_scratch_check.py on an NVIDIA H100: bias gradients, 3-D and full sums, a transposed input,
    sums along the contiguous dimension (no buffer), each alone from an empty cache."""
    from benchmarks.reduce_scratch_check import report

    report(str(BENCH / "reduce-scratch-h100.json"))
    cases = json.loads((BENCH / "reduce-scratch-h100.json").read_text())["cases"]
    assert len(cases) >= 12 and any(c["perm"] for c in cases) and sum(c["measured"] > 0 for c in cases) >= 6
    assert capsys.readouterr().out.splitlines()[-1].endswith(f"{len(cases)} of {len(cases)} equal")


def test_every_card_gives_its_sms_and_resident_threads():
    """What sizes a reduction's buffer on each card: a card added without them would leave it to the others."""
    for c in CARDS:
        assert c["sms"] > 0 and c["threads_per_sm"] in (1024, 1536, 2048), c["id"]
