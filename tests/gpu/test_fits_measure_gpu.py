"""`fits --measure` on a GPU: the batch it says is the largest ran in its trial and the batch above it did not, and it
runs on the emulated card in the plain loop a user writes (benchmarks/boundary_trial.py, not the engine's step)."""

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


# A transformer whose boundary on the small card is a few dozen samples, so the search is a handful of trials (about
# ten seconds each: a fresh process, CUDA and cuBLAS started, two steps) even where the estimate is far off.
LEVERS = {"model": "transformer", "layers": 4, "width": 512, "seq_len": 512, "precision": "amp_bf16"}


def test_the_measured_largest_batch_runs_in_a_plain_loop_and_the_next_does_not():
    levers = LEVERS
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in levers.items()] + ["--max-batch=256"]
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
    # The answer a learner acts on: their own loop runs at it. (The batch above it is not asked of the plain loop: near
    # the limit the verdict turns on a few megabytes, docs/benchmarks/fits-boundary.md, "The real verdict batch by
    # batch".)
    assert plain_loop_runs(levers, largest, card, measured["outside"])
