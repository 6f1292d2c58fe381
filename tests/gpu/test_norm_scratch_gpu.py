"""Layer norm's backward on this GPU takes the scratch memory experiments/estimate/norm_scratch.py computes without
one: shapes on both sides of the two-pass path's thresholds (rows past 64 Ki, features under 32 x SMs / 2), three
dtypes, with and without a bias, read from CUDA's allocator history of the op alone."""

import pytest
import torch

from experiments.estimate.norm_scratch import layer_norm_scratch
from tests.gpu.gpu_lock import one_gpu_user  # noqa: F401 - the fixture the marks use

pytestmark = [
    pytest.mark.usefixtures("one_gpu_user"),
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

SHAPES = [
    (65536, 768, torch.float32, True),
    (65537, 768, torch.float32, True),
    (157994, 768, torch.float32, True),
    (100000, 1024, torch.bfloat16, True),
    (300000, 512, torch.float16, False),
    (70000, 2080, torch.bfloat16, True),
    (70000, 4096, torch.bfloat16, True),
    (1000, 768, torch.float32, True),
]


@pytest.mark.parametrize("m,n,dtype,bias", SHAPES, ids=lambda v: str(v).removeprefix("torch."))
def test_layer_norm_backward_takes_what_the_rule_computes(m, n, dtype, bias):
    dev = torch.device("cuda", 0)
    props = torch.cuda.get_device_properties(dev)
    x = torch.randn(m, n, device=dev, dtype=dtype)
    grad = torch.randn_like(x)
    weight = torch.randn(n, device=dev, dtype=dtype)
    b = torch.randn(n, device=dev, dtype=dtype) if bias else None
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, [n], weight, b, 1e-5)
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python", max_entries=10_000)
    try:
        start = len(torch.cuda.memory._snapshot()["device_traces"][0])
        out = torch.ops.aten.native_layer_norm_backward(grad, x, [n], mean, rstd, weight, b, [True, True, bias])
        torch.cuda.synchronize()
        trace = torch.cuda.memory._snapshot()["device_traces"][0][start:]
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    del out
    sizes = [e["size"] for e in trace if e["action"] == "alloc"]
    part_w, part_b, summed, semaphores = layer_norm_scratch(
        (m, n),
        (n, 1),
        weight.element_size(),
        True,
        bias,
        on=((props.multi_processor_count, props.max_threads_per_multi_processor),),
    )
    print(m, n, dtype, bias, sizes, (part_w, part_b, summed, semaphores))
    parts = [p for p in (part_w, part_b) if p]
    outputs = 1 + 1 + bias  # dX, and the weight's and the bias's gradients
    sums = len(parts) if parts else 0
    expected = outputs + len(parts) + sums * (1 + (summed > 0) + (semaphores > 0))
    assert len(sizes) == expected, (sizes, (part_w, part_b, summed, semaphores))
    for value in {*parts, summed}:
        if value:
            assert sizes.count(value) == (parts.count(value) if value in parts else 0) + (
                sums if value == summed else 0
            )
