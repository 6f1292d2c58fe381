"""The scratch memory a kernel takes, probed on the op alone (experiments/estimate/workspaces.py), is what the same
op takes inside a real training step: the same allocations, in the same order (CUDA's memory history of both)."""

import contextlib
import gc

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from experiments.core.config import ExperimentConfig
from experiments.estimate import workspaces
from experiments.measure.device import warm_up_cuda
from experiments.training.models import spec_for
from experiments.training.strategies import AMP_DTYPES, float32_precision, make_optimizer
from tests.gpu.gpu_lock import one_gpu_user  # noqa: F401 - the fixture the marks use

pytestmark = [
    pytest.mark.usefixtures("one_gpu_user"),
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


class _InStep(TorchDispatchMode):
    """Each probed op's scratch allocations inside the step, read from the allocator's history around it."""

    def __init__(self, device):
        super().__init__()
        self.device, self.seen = device, {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        sig = workspaces.signature(func, args, kwargs)
        if sig is None:
            return func(*args, **kwargs)
        torch.cuda.synchronize(self.device)
        start = len(workspaces._trace(self.device))
        out = func(*args, **kwargs)
        torch.cuda.synchronize(self.device)
        self.seen.setdefault(sig, set()).add(workspaces.scratch_allocations(workspaces._trace(self.device)[start:]))
        return out


def _step_scratch(cfg: ExperimentConfig) -> dict:
    dev = torch.device("cuda")
    warm_up_cuda(dev)
    spec, amp = spec_for(cfg), AMP_DTYPES.get(cfg.precision)
    mode = _InStep(dev)
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python", max_entries=1_000_000)
    try:
        with float32_precision(cfg):
            torch.manual_seed(0)
            model = spec.build(cfg, dev)
            opt = make_optimizer(cfg, model.parameters())
            inputs, targets = spec.batch(cfg, dev, 1)
            for step in range(2):
                opt.zero_grad(set_to_none=True)
                with mode if step == 1 else contextlib.nullcontext():
                    with torch.amp.autocast("cuda", dtype=amp) if amp else contextlib.nullcontext():
                        loss = spec.loss(cfg, model, inputs, targets)
                    loss.backward()
                del loss
                opt.step()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    del model, opt, inputs, targets
    gc.collect()
    torch.cuda.empty_cache()
    return mode.seen


@pytest.mark.parametrize(
    "cfg",
    [
        ExperimentConfig(model="cnn", layers=4, width=128, batch=32, image_size=64, device="cuda"),
        ExperimentConfig(model="cnn", layers=3, width=64, batch=16, image_size=64, precision="amp_bf16", device="cuda"),
    ],
    ids=["cnn-fp32", "cnn-amp-bf16"],
)
def test_the_probe_alone_sees_the_scratch_allocations_of_the_step(cfg):
    seen = _step_scratch(cfg)
    assert any(op.startswith('{"args"') and '"convolution_backward"' in op for op in seen)
    dev, mismatched = torch.device("cuda"), []
    for sig, in_step in seen.items():
        assert len(in_step) == 1, f"one op signature took different scratch memory in one step: {in_step}"
        alone = workspaces.measure(sig, dev)
        if alone not in in_step:
            mismatched.append((sig[:120], alone, in_step))
    assert not mismatched, mismatched
    # A convolution's backward takes a workspace for each gradient: both are in the table, each its own size.
    assert any(len(s) == 2 for ss in seen.values() for s in ss)
