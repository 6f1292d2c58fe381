"""A reduced `mse_loss`, `smooth_l1_loss` or `huber_loss` on this GPU allocates what
experiments/estimate/cuda_kernels.py says without one: mse's and smooth L1's result in a storage of the broadcast
shape, the elementwise loss at that shape (huber's at the input's), and the mean's or sum's partial sums and
semaphores (reduce_scratch.py, computed for this GPU's SMs), read from CUDA's allocator history of the op alone."""

import math

import pytest
import torch

from experiments.estimate import reduce_scratch
from experiments.estimate.cuda_kernels import scratch_as_cuda
from tests.gpu.gpu_lock import one_gpu_user  # noqa: F401 - the fixture the marks use

pytestmark = [
    pytest.mark.usefixtures("one_gpu_user"),
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

aten = torch.ops.aten
CASES = [
    (aten.mse_loss.default, (688, 384), (688, 384), torch.float32, 1),
    (aten.mse_loss.default, (640, 384), (640, 384), torch.float16, 1),
    (aten.mse_loss.default, (16, 128, 448), (16, 128, 448), torch.bfloat16, 1),
    (aten.mse_loss.default, (4096, 1024), (1024,), torch.float32, 2),
    (aten.mse_loss.default, (37, 5), (37, 5), torch.float32, 1),
    (aten.smooth_l1_loss.default, (688, 384), (688, 384), torch.float32, 1),
    (aten.smooth_l1_loss.default, (2048, 768), (2048, 768), torch.bfloat16, 2),
    (aten.huber_loss.default, (688, 384), (688, 384), torch.float32, 1),
    (aten.huber_loss.default, (2048, 768), (2048, 768), torch.bfloat16, 2),
]


def _alloc_sizes(fn) -> list[int]:
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python", max_entries=10_000)
    try:
        start = len(torch.cuda.memory._snapshot()["device_traces"][0])
        out = fn()
        torch.cuda.synchronize()
        trace = torch.cuda.memory._snapshot()["device_traces"][0][start:]
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    del out
    return [e["size"] for e in trace if e["action"] == "alloc"]


@pytest.mark.parametrize("func,shape,target_shape,dtype,reduction", CASES, ids=str)
def test_a_reduced_loss_takes_its_output_the_elementwise_loss_and_the_reduction_buffers(
    func, shape, target_shape, dtype, reduction
):
    dev = torch.device("cuda", 0)
    props = torch.cuda.get_device_properties(dev)
    x = torch.randn(shape, device=dev, dtype=dtype)
    y = torch.randn(target_shape, device=dev, dtype=dtype)
    sizes = _alloc_sizes(lambda: func(x, y, reduction))
    full = math.prod(torch.broadcast_shapes(x.shape, y.shape)) * x.element_size()
    strides = [math.prod(shape[i + 1 :]) for i in range(len(shape))]
    kernel = reduce_scratch.mean_scratch if reduction == 1 else reduce_scratch.sum_scratch
    here = ((props.multi_processor_count, props.max_threads_per_multi_processor),)
    buffers = [b for b in kernel(shape, strides, x.element_size(), [], x.element_size(), True, on=here) if b]
    print(func, shape, dtype, reduction, sizes, buffers)
    if func is aten.huber_loss.default:  # the loss first (empty_like), then the reduction's own 0-dim result
        assert sizes == [full, x.element_size(), *buffers]
    else:  # the result at the broadcast shape (resized to 0-dim), then the loss
        assert sizes == [full, full, *buffers]
    # The replay's rule: the elementwise loss and the buffers on the card list's largest GPU (this one's, or more).
    with torch.device("meta"):
        rule = scratch_as_cuda(func, (x.to("meta"), y.to("meta"), reduction), torch.empty((), dtype=dtype))
    assert rule[0] == full and len([b for b in rule[1:] if b]) == len(buffers)
