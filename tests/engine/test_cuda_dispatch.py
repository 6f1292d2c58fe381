"""A CPU replay of a CUDA run casts and picks kernels as CUDA does (experiments/estimate/cuda_autocast.py,
cuda_kernels.py); outside the replay the CPU's own behaviour is untouched."""

import pytest
import torch

from experiments.estimate.cuda_autocast import POLICIES, REGISTERED, cuda_autocast


def test_every_op_cuda_autocasts_in_this_torch_has_a_policy_or_refuses():
    """Every op CUDA's autocast registers in the installed torch is taken over: by its policy, or (one added by a
    newer torch) by a kernel that refuses it by name, never left to the CPU's policy."""
    assert REGISTERED, "no AutocastCUDA registrations found"
    with cuda_autocast(True) as taken:
        pass
    assert not sorted((REGISTERED - set(POLICIES)) - set(taken))


def test_an_op_without_a_known_cuda_policy_is_named_not_guessed(monkeypatch):
    """As a torch newer than the table would: `exp` and `layer_norm` (fp32 on CUDA, no CPU autocast kernel) lose their
    policies. Outside an autocast region nothing changes; inside it the CUDA estimate cannot be made and names the op,
    for a built-in model as for one's own."""
    from experiments.core.config import ExperimentConfig
    from experiments.estimate import cuda_autocast as module
    from experiments.estimate.replay import replay
    from experiments.estimate.unpredictable import CannotPredict

    monkeypatch.delitem(module.POLICIES, "exp")
    monkeypatch.delitem(module.POLICIES, "layer_norm")
    with cuda_autocast(True):
        assert torch.randn(3).exp().dtype is torch.float32
        with torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(module.UnknownAutocastPolicy, match="aten.exp"):
            torch.randn(3, dtype=torch.bfloat16).exp()
    cfg = ExperimentConfig(model="transformer", layers=1, width=64, batch=2, seq_len=16, heads=2, precision="amp_bf16")
    with pytest.raises(CannotPredict) as e:
        replay(cfg, block=512)
    assert e.value.info["op"] == "aten.layer_norm" and "autocast policy" in e.value.info["message"]
    assert (e.value.info["phase"], e.value.info["step"]) == ("forward", 1)
    assert replay(cfg)["peak_bytes"] > 0  # the CPU's own estimate does not use CUDA's table
