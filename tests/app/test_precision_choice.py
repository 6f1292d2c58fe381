"""Strict fp32 is a choice the learner can make and see: in the sandbox and as lesson 3's measured pair."""

from __future__ import annotations

import pytest

from tests.app.pages import open_page


@pytest.mark.parametrize(
    ("lang", "default", "strict"),
    [
        ("en", "FP32 (PyTorch defaults)", "Strict FP32 (no TF32)"),
        ("zh", "FP32（PyTorch 默认）", "严格 FP32（不用 TF32）"),
    ],
)
def test_the_sandbox_offers_pytorch_defaults_and_strict_fp32(lang, default, strict):
    at = open_page(
        "optimization",
        lang,
        query={"optimization_precision": "fp32_strict", "optimization_technique": "strict_fp32_cnn"},
    )
    assert not at.exception, [e.value for e in at.exception]
    select = at.selectbox(key="optimization_precision")
    assert select.value == "fp32_strict" and {default, strict} <= set(select.options)
    assert at.selectbox(key="optimization_technique").value == "strict_fp32_cnn"
    shown = " ".join(m.value for m in at.markdown)
    assert "torch.backends.cudnn.allow_tf32 = False" in shown  # the claim names the one line strict fp32 adds
