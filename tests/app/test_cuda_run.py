"""The app's Run path on a CUDA machine (skipped without CUDA): the results must be CUDA results."""

from __future__ import annotations

import pytest
import torch

from tests.app.pages import open_page, run_until, small_config
from tests.gpu.gpu_lock import one_gpu_user  # noqa: F401 - the fixture the marks use

pytestmark = [
    pytest.mark.usefixtures("one_gpu_user"),
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


def test_run_on_cuda_shows_cuda_results():
    at = open_page("monitoring", state=small_config("monitoring") | {"monitoring_batch": 64, "monitoring_width": 1024})
    assert not at.exception, [e.value for e in at.exception]
    at.button(key="monitoring.run").click().run()
    run_until(at, lambda a: "monitoring.done" in a.session_state)
    assert not at.exception and not at.error, [e.value for e in at.error]
    result = at.session_state["monitoring.done"]["statuses"][0]["result"]
    assert result["device"]["type"] == "cuda"
    assert all(p["reserved_bytes"] is not None for p in result["phases"])
    specs = " ".join(c.proto.spec for c in at.get("vega_lite_chart"))
    assert "Reserved" in specs
    print(
        f"app run on {result['device']['name']}: peak {result['peak_bytes'] / 2**20:.1f} MiB, "
        f"step {result['step_ms']['median']:.3f} ms"
    )
