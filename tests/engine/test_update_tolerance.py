"""The update check's tolerance held from both sides, without ranks: for an SGD step it is exactly the hand-derived
bound (the update's change for a gradient off by delta, plus the new weight's rounding), so a tolerance widened by
any factor fails here; and `compare` calls a step off by a few tolerances DIFFERS and one within it the same."""

from __future__ import annotations

import math

import torch

from experiments.distributed import update_check as uc


def _sgd(p: torch.Tensor, lr: float = 0.1, wd: float = 0.01) -> torch.optim.SGD:
    return torch.optim.SGD([torch.nn.Parameter(p.clone())], lr=lr, weight_decay=wd)


def _by_hand(p, g, lr, wd, terms, eps):
    """SGD's first step moves p by -lr (g + wd p); a gradient off by delta moves it by lr delta more; the new weight
    is rounded (2 ulps) and so is the step (6 roundings of the update)."""
    delta = float(g.abs().max()) * (16 * eps + 8 * math.sqrt(terms) * eps)
    update = -lr * (g + wd * p)
    return lr * delta + eps * (2 * (p + update).abs() + 6 * update.abs())


def test_the_sgd_tolerance_is_the_hand_derived_bound():
    torch.manual_seed(0)
    p, g = torch.randn(64), torch.randn(64)
    lr, wd, terms = 0.1, 0.01, 256
    eps = torch.finfo(torch.float32).eps
    got = uc.tolerance(p, g, _sgd(p, lr, wd), eps, eps, terms)
    # fp32's own rounding of (g + delta) - g leaves the sensitivity about 0.1 % from lr x delta.
    assert torch.allclose(got, _by_hand(p, g, lr, wd, terms, eps), rtol=1e-2, atol=0)


def test_compare_calls_a_step_a_few_tolerances_off_different_and_one_within_the_same():
    torch.manual_seed(1)
    p, g = torch.randn(32), torch.randn(32)
    opt = _sgd(p)
    eps = torch.finfo(torch.float32).eps
    expected = p + uc.first_step_update(g, p, opt)
    tol = _by_hand(p, g, 0.1, 0.01, 64, eps)
    within = expected + 0.5 * tol
    off = expected.clone()
    off[3] += 4 * tol[3]
    assert uc.compare([within], [expected], [p], [g], opt, eps, eps, 64)["ok"]
    verdict = uc.compare([off], [expected], [p], [g], opt, eps, eps, 64)
    assert not verdict["ok"] and verdict["mismatched"] == 1 and 3.9 < verdict["worst_vs_tolerance"] < 4.1
