"""The data-parallel update check's tolerance, on one process: a reordered sum of the same gradient passes, a wrong
gradient does not, and the first-step rule it is built on is torch's."""

from __future__ import annotations

import pytest
import torch

from experiments.core.config import ExperimentConfig
from experiments.distributed.update_check import compare, compute_eps, first_step_update, summed_terms
from experiments.training.step import build_state, train_step
from experiments.training.strategies import make_optimizer

EPS32 = torch.finfo(torch.float32).eps
CONFIGS = [
    {"model": "transformer", "layers": 2, "width": 64, "heads": 4, "seq_len": 64, "batch": 4, "seed": 370},
    {"model": "mlp", "layers": 4, "width": 128, "batch": 32},
    {"model": "cnn", "layers": 3, "width": 8, "image_size": 16, "batch": 4},
]


def _step(cfg: ExperimentConfig, batch: slice | None = None, scale: float = 1.0):
    """(weights before, after, gradients, optimizer) of one step; `batch` takes a slice of the batch only, `scale`
    multiplies every gradient (a reduction that sums where it should average)."""
    s = build_state(cfg, torch.device("cpu"))
    before = [p.detach().clone() for p in s.model.parameters()]
    if batch is not None:
        s.inputs = {k: v[batch] for k, v in s.inputs.items()}
        s.targets = {k: v[batch] for k, v in s.targets.items()}
        s.cfg = cfg.replace(batch=s.inputs["x"].shape[0])
    if scale != 1.0:
        for p in s.model.parameters():
            p.register_hook(lambda g: g * scale)
    train_step(s)
    return (
        before,
        [p.detach().clone() for p in s.model.parameters()],
        [p.grad.clone() for p in s.model.parameters()],
        s.optimizer,
    )


def _verdict(cfg, other, reference) -> dict:
    before, expected, grads, optimizer = reference
    return compare(other[1], expected, before, grads, optimizer, EPS32, EPS32, summed_terms(cfg), other[2])


@pytest.mark.parametrize("changes", CONFIGS)
@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_a_reordered_sum_passes_and_a_wrong_gradient_does_not(changes, optimizer):
    torch.set_num_threads(1)
    cfg = ExperimentConfig(device="cpu", optimizer=optimizer, steps=2, timing_steps=0, **changes)
    reference = _step(cfg)
    # The whole batch as two accumulated halves: the sum of each rank's slice, on one device.
    halves = _verdict(cfg, _step(cfg.replace(accum=2)), reference)
    assert halves["ok"] and halves["gradient_vs_delta"] < 1, halves
    # A rank that skips the all-reduce steps with its own slice's gradient.
    alone = _verdict(cfg, _step(cfg, batch=slice(0, cfg.batch // 2)), reference)
    assert not alone["ok"] and alone["worst_vs_tolerance"] > 100, alone
    if optimizer == "sgd":  # summed instead of averaged over 2 ranks (Adam's step barely sees a scale)
        summed = _verdict(cfg, _step(cfg, scale=2.0), reference)
        assert not summed["ok"] and summed["worst_vs_tolerance"] > 100, summed


@pytest.mark.parametrize("optimizer", ["sgd", "sgd_momentum", "adam", "adamw"])
def test_first_step_rule_is_torchs_step(optimizer):
    """The rule the tolerance differentiates, against the optimizer's own first step; near-zero gradients too."""
    gen = torch.Generator().manual_seed(0)
    p = torch.randn(4096, generator=gen)
    g = torch.randn(4096, generator=gen) * torch.logspace(-12, 0, 4096)  # from far below Adam's eps to 1
    param = torch.nn.Parameter(p.clone())
    opt = make_optimizer(ExperimentConfig(optimizer=optimizer), [param])
    param.grad = g.clone()
    opt.step()
    expected = param.detach() - p
    got = first_step_update(g, p, opt)
    assert torch.allclose(got, expected, rtol=1e-5, atol=4 * EPS32 * float(p.abs().max())), float(
        (got - expected).abs().max()
    )


def test_the_rounding_format_is_the_one_the_step_computes_in(monkeypatch):
    bf16, fp16 = torch.finfo(torch.bfloat16).eps, torch.finfo(torch.float16).eps
    assert compute_eps("amp_bf16", "cpu", "mlp") == compute_eps("bf16", "cuda", "cnn") == bf16
    assert compute_eps("amp_fp16", "cuda", "mlp") == compute_eps("tf32", "cuda", "mlp") == fp16
    assert compute_eps("fp32", "cpu", "cnn") == EPS32
    # A plain fp32 script's CNN on a GPU runs its convolutions in TF32 (cuDNN's default), its matmuls in fp32.
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    assert compute_eps("fp32", "cuda", "cnn") == fp16 and compute_eps("fp32", "cuda", "mlp") == EPS32
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    assert compute_eps("fp32", "cuda", "cnn") == EPS32


def test_summed_terms_counts_positions_of_the_global_batch():
    assert summed_terms(ExperimentConfig(model="mlp", batch=64)) == 64
    assert summed_terms(ExperimentConfig(model="transformer", batch=4, seq_len=128, width=64, heads=8)) == 512
    assert summed_terms(ExperimentConfig(model="cnn", batch=8, image_size=32, width=16)) == 8 * 32 * 32
