"""A data-parallel launcher kept warm (experiments/distributed/launcher.keep_warm) on a GPU: the launcher imports
torch but creates no CUDA context, so NCCL ranks it spawns later measure what ranks of a fresh launcher measure.
Skipped without CUDA.

    python3 -m pytest tests/gpu/test_warm_launcher_gpu.py -v -s
"""

from __future__ import annotations

import pytest
import torch

from tests.gpu.gpu_lock import one_gpu_user  # noqa: F401 - the fixture the marks use

pytestmark = [
    pytest.mark.usefixtures("one_gpu_user"),
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

PLAN = {"model": "mlp", "layers": 4, "width": 1024, "batch": 16, "steps": 2, "timing_steps": 2, "device": "cuda"}


def test_ranks_of_a_warm_launcher_measure_what_a_fresh_launchers_do(monkeypatch):
    from experiments.core.config import DistributedConfig
    from experiments.distributed import launcher

    monkeypatch.setattr(launcher, "_warm", {})
    monkeypatch.setattr(launcher, "_keeping_warm", False)
    plans = [DistributedConfig.from_dict(PLAN | {"world_size": 1, "strategy": "ddp"}).to_dict()]
    cold = launcher.spawn_via_child(plans, "cuda")[0]
    launcher.keep_warm("cuda")
    warm_proc = launcher._warm["cuda"]
    try:
        warm = launcher.spawn_via_child(plans, "cuda")[0]
        assert warm_proc.wait(30) == 0  # that launcher ran this launch
        for got in (cold, warm):
            assert not got["errors"] and sorted(got["results"]) == [0], got["errors"]
        a, b = cold["results"][0], warm["results"][0]
        # Setup and the first step are deterministic. Later steps are not, warm or cold: on the H200, of five
        # launches of this plan (3 fresh, 2 warm) three peaked in step 1 at 161.2 MiB and two in step 2 at
        # 177.2 MiB (one more set of gradients alive), one of each kind of launcher in each group.
        first = [(p["phase"], p["allocated_bytes"]) for p in a["phases"] if (p.get("step") or 0) <= 1]
        assert first == [(p["phase"], p["allocated_bytes"]) for p in b["phases"] if (p.get("step") or 0) <= 1]
        assert len(a["phases"]) == len(b["phases"]) and b["step_ms"]["median"] > 0
    finally:
        for proc in launcher._warm.values():
            launcher.stop_group(proc)
