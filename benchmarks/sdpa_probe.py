"""Which kernel scaled_dot_product_attention takes on this GPU for a few shapes and dtypes, and what its backward
allocates beside the three gradients (CUDA's allocator history of the backward alone). Its output on an NVIDIA H200:
docs/benchmarks/sdpa-probe-h200.txt; experiments/estimate/cuda_kernels.py's rule for the backward's workspace.

    python3 benchmarks/sdpa_probe.py > sdpa-probe.txt
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend

DEV = "cuda"
NAMES = {int(v): k for k, v in SDPBackend.__members__.items()}
CHOICES = [
    (16, 4, 128, 112, torch.bfloat16),
    (16, 4, 128, 64, torch.bfloat16),
    (8, 12, 1024, 64, torch.bfloat16),
    (8, 12, 1024, 64, torch.float16),
    (4, 32, 2048, 128, torch.bfloat16),
    (16, 4, 128, 112, torch.float32),
]
BACKWARDS = [
    (16, 4, 128, 112, torch.bfloat16),
    (8, 4, 128, 112, torch.bfloat16),
    (16, 4, 256, 112, torch.bfloat16),
    (16, 8, 128, 64, torch.bfloat16),
    (8, 12, 1024, 64, torch.bfloat16),
    (4, 32, 2048, 128, torch.bfloat16),
    (8, 12, 1024, 64, torch.float16),
]


def inputs(b, h, s, d, dtype, kv_heads=None, mask=False):
    def make(heads):
        return torch.randn(b, heads, s, d, device=DEV, dtype=dtype, requires_grad=True)

    m = torch.zeros(b, 1, s, s, device=DEV, dtype=dtype) if mask else None
    return make(h), make(kv_heads or h), make(kv_heads or h), m


def choice(b, h, s, d, dtype, mask=False, drop=0.0, causal=False, kv_heads=None) -> str:
    q, k, v, m = inputs(b, h, s, d, dtype, kv_heads, mask)
    picked = torch._fused_sdp_choice(q, k, v, m, drop, causal, enable_gqa=(kv_heads or h) != h)
    return NAMES.get(picked, str(picked))


def backward_allocations(b, h, s, d, dtype, causal: bool) -> tuple[list[int], int, int]:
    """(the sizes the backward allocates in order, the query's bytes, the most held over what was allocated before)."""
    q, k, v, _ = inputs(b, h, s, d, dtype)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    grad = torch.randn_like(out)
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python", max_entries=10_000)
    start = len(torch.cuda.memory._snapshot()["device_traces"][0])
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    grads = torch.autograd.grad(out, (q, k, v), grad)
    torch.cuda.synchronize()
    trace = torch.cuda.memory._snapshot()["device_traces"][0][start:]
    torch.cuda.memory._record_memory_history(enabled=None)
    del grads
    sizes = [e["size"] for e in trace if e["action"] == "alloc"]
    return sizes, q.numel() * q.element_size(), torch.cuda.max_memory_allocated() - before


def main() -> None:
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    for b, h, s, d, dtype in CHOICES:
        for kw in ({}, {"causal": True}, {"drop": 0.1}, {"mask": True}, {"kv_heads": h // 4}):
            print("choice", (b, h, s, d, str(dtype)[6:]), kw, choice(b, h, s, d, dtype, **kw))
    for b, h, s, d, dtype in BACKWARDS:
        for causal in (False, True):
            name = choice(b, h, s, d, dtype, causal=causal)
            sizes, q_bytes, held = backward_allocations(b, h, s, d, dtype, causal)
            rule = b * h * s * d * 4 + b * h * s * 4 + 256
            print(
                "bwd", name, (b, h, s, d, str(dtype)[6:]), "causal" if causal else "",
                "q bytes", q_bytes, "allocs", sizes, "peak over", held, "rule", rule,
            )  # fmt: skip


if __name__ == "__main__":
    main()
