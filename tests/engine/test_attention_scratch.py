"""The workspace a CUDA replay holds in a 16-bit attention's backward (experiments/estimate/cuda_kernels.py), against
what cuDNN's backward allocated on an NVIDIA H200 (`python3 benchmarks/sdpa_probe.py`,
docs/benchmarks/sdpa-probe-h200.txt): beside the three gradients, one buffer of B x H x S x D x 4 + B x H x S x 4 +
256 bytes, at every shape and dtype probed."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch

from experiments.estimate.cuda_kernels import scratch_as_cuda

PROBE = Path(__file__).resolve().parents[2] / "docs" / "benchmarks" / "sdpa-probe-h200.txt"
LINE = re.compile(r"^bwd (\w+) (\(.*?\)) .*q bytes (\d+) allocs (\[.*?\])")
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}
aten = torch.ops.aten


def probed() -> list[tuple[str, tuple, int, list[int]]]:
    out = []
    for line in PROBE.read_text().splitlines():
        m = LINE.match(line)
        if m:
            out.append((m.group(1), ast.literal_eval(m.group(2)), int(m.group(3)), ast.literal_eval(m.group(4))))
    return out


def test_the_h200_ran_cudnn_for_every_16_bit_case_probed():
    rows = probed()
    assert len(rows) >= 12
    assert {name for name, *_ in rows} == {"CUDNN_ATTENTION"}
    choices = [line for line in PROBE.read_text().splitlines() if line.startswith("choice")]
    assert all(line.endswith("CUDNN_ATTENTION") for line in choices if "float32" not in line)


@pytest.mark.parametrize(
    "func",
    [
        aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
        aten._scaled_dot_product_flash_attention_backward.default,
        aten._scaled_dot_product_efficient_attention_backward.default,
    ],
)
def test_the_replays_attention_backward_holds_what_cudnn_allocated(func):
    for _name, (b, h, s, d, dtype), q_bytes, allocs in probed():
        q = torch.empty(b, h, s, d, dtype=DTYPES[dtype], device="meta")
        assert q.numel() * q.element_size() == q_bytes
        assert allocs[:3] == [q_bytes] * 3  # the three gradients: outputs the replay has as tensors
        assert scratch_as_cuda(func, (q, q, q, q, q), None) == (allocs[3],)
        assert len(allocs) == 4


def test_fp32_attention_takes_no_rule():
    q = torch.empty(2, 4, 128, 64, device="meta")
    assert scratch_as_cuda(aten._scaled_dot_product_flash_attention_for_cpu_backward.default, (q, q), None) == ()
