"""`fits --measure` on a GPU: the batch it says is the largest runs on the emulated card in the plain loop a user
writes (benchmarks/boundary_trial.py, not the engine's step), and the batch above it does not."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.gpu.gpu_lock import one_gpu_user  # noqa: F401 - the fixture the marks use

pytestmark = [
    pytest.mark.usefixtures("one_gpu_user"),
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

ROOT = Path(__file__).resolve().parents[2]
CARD_GIB = 1.5


def plain_loop_runs(levers: dict, batch: int, card_bytes: int, outside: dict) -> bool:
    arg = json.dumps(
        {
            "params": {"preset": "builtin", "levers": levers, "batch": batch},
            "card_bytes": card_bytes,
            "expandable": False,
            "outside": outside,
        }
    )
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "boundary_trial.py"), arg],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return json.loads(r.stdout.strip().splitlines()[-1])["ran"]


@pytest.mark.parametrize(
    "levers",
    [
        {"model": "mlp", "layers": 8, "width": 2048, "precision": "fp32", "optimizer_impl": "foreach"},
        {"model": "transformer", "layers": 4, "width": 512, "seq_len": 512, "precision": "amp_bf16"},
    ],
)
def test_the_measured_largest_batch_runs_in_a_plain_loop_and_the_next_does_not(levers):
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in levers.items()]
    r = subprocess.run(
        [sys.executable, "-m", "experiments", "fits", f"--capacity-gib={CARD_GIB}", "--measure", "--json", *flags],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    measured = json.loads(r.stdout)["measured"]["default"]
    largest = measured["largest_batch"]
    print(
        levers,
        "estimate",
        measured["estimate"],
        "measured",
        largest,
        [(t["batch"], t["ran"]) for t in measured["trials"]],
    )
    assert largest and largest > 0
    tried = {t["batch"]: t["ran"] for t in measured["trials"]}
    assert tried[largest] is True and tried[largest + 1] is False
    card = int(CARD_GIB * 2**30)
    assert plain_loop_runs(levers, largest, card, measured["outside"])
    assert not plain_loop_runs(levers, largest + 1, card, measured["outside"])
