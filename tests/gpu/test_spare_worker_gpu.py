"""A lane's spare worker on a GPU server (experiments/jobs/lanes.py): it waits without a CUDA context (no GPU memory
of its own), and once the worker is killed it takes the GPU and runs a CUDA job whose peak is the same configuration's
peak in the worker it replaced. Skipped without CUDA.

    python3 -m pytest tests/gpu/test_spare_worker_gpu.py -v -s
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
import torch

from tests.engine.test_spare_worker import _until
from tests.gpu.gpu_lock import one_gpu_user  # noqa: F401 - the fixture the marks use

pytestmark = [
    pytest.mark.usefixtures("one_gpu_user"),
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

RUN = {"device": "cuda", "layers": 4, "width": 1024, "batch": 64, "steps": 2, "timing_steps": 0}


def _gpu_pids() -> set[int]:
    """The processes holding a CUDA context on the GPUs, as the driver lists them."""
    out = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"], capture_output=True, text=True, check=True
    ).stdout
    return {int(line) for line in out.split() if line.strip().isdigit()}


def _used_mib() -> int:
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return int(out.split()[0])


def _done(client, ticket) -> dict:
    _until(lambda: client.status(ticket, result=False)["state"] not in ("queued", "running"), 300, "the job to end")
    return client.status(ticket)


def test_the_spare_holds_no_cuda_context_and_takes_the_gpu_when_the_worker_dies():
    from experiments.jobs.worker import WorkerClient

    client = WorkerClient(inline=False, rates=False, spare=True)
    assert client.device_info(timeout=300)["type"] == "cuda"
    lane = client._lanes[0]
    first = _done(client, client.submit("run", RUN))
    used = _used_mib()  # before the spare could have made a context (its imports take seconds)
    assert first["state"] == "done", first["error"]
    spare = _until(lambda: lane.standby if lane.standby and lane.standby.proc.is_alive() else None, 300, "a spare")
    time.sleep(15)  # its imports and its CPU run made
    holders = _gpu_pids()
    listed = lane.proc.pid in holders  # the driver lists this namespace's pids (not in every container)
    if listed:
        assert spare.proc.pid not in holders, (holders, lane.proc.pid, spare.proc.pid)
    # A CUDA context costs hundreds of MiB of GPU memory; the spare added none.
    assert _used_mib() - used < 64, (used, _used_mib())

    os.kill(lane.proc.pid, signal.SIGKILL)
    _until(lambda: lane.proc.pid == spare.proc.pid, 30, "the spare to take over")
    again = _done(client, client.submit("run", dict(RUN, seed=1)))
    assert again["state"] == "done", again["error"]
    if listed:
        assert spare.proc.pid in _gpu_pids()
    # The same configuration's peak, measured by the worker it replaced (the seed changes the values, not the bytes).
    assert again["result"]["peak_bytes"] - again["result"]["baseline_bytes"] == (
        first["result"]["peak_bytes"] - first["result"]["baseline_bytes"]
    )


def test_a_cuda_job_whose_worker_is_killed_mid_run_is_run_again_with_the_same_peak_for_every_learner():
    """The killed worker's CUDA context is gone with it; the spare runs the job again on the GPU, from its start, and
    both learners who asked for it get the peak the configuration has when nothing is killed."""
    from experiments.jobs.worker import WorkerClient

    client = WorkerClient(inline=False, rates=False, spare=True)
    assert client.device_info(timeout=300)["type"] == "cuda"
    lane = client._lanes[0]
    # Long enough (about 250 steps of a 0.5 B-parameter MLP) for the kill to land while it runs.
    long = {"device": "cuda", "layers": 8, "width": 8192, "batch": 1024, "steps": 50, "timing_steps": 200}
    ref = _done(client, client.submit("run", dict(long, seed=1)))
    assert ref["state"] == "done", ref["error"]
    spare = _until(lambda: lane.standby if lane.standby and lane.standby.proc.is_alive() else None, 120, "a spare")
    first, joined = client.submit("run", long), client.submit("run", long)
    _until(lambda: client.status(first, result=False)["progress"], 120, "the run to start")
    assert client.status(first, result=False)["state"] == "running"
    os.kill(lane.proc.pid, signal.SIGKILL)
    _until(lambda: lane.proc.pid == spare.proc.pid, 30, "the spare to take over")
    a, b = _done(client, first), _done(client, joined)
    assert a["state"] == b["state"] == "done", (a["error"], b["error"])
    # The seed changes the values, not the bytes: the peak of the same configuration run with no kill.
    net = ref["result"]["peak_bytes"] - ref["result"]["baseline_bytes"]
    for got in (a, b):
        assert got["result"]["peak_bytes"] - got["result"]["baseline_bytes"] == net
