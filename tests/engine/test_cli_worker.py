import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments.jobs.worker import WorkerClient

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "experiments", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_cli_json_shape():
    p = _cli("run", "--device", "cpu", "--layers", "2", "--width", "64", "--batch", "8", "--steps", "2",
             "--timing-steps", "2", "--json")
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    for key in ("config", "device", "phases", "peak_bytes", "step_ms", "tflops", "breakdown", "estimate", "oom"):
        assert key in r
    assert {"type", "name", "total_bytes", "torch_version"} <= set(r["device"])
    assert {"step", "phase", "allocated_bytes", "reserved_bytes", "peak_bytes", "ms"} <= set(r["phases"][0])
    assert {"median", "p10", "p90"} <= set(r["step_ms"])
    assert "peak_bytes" in r["estimate"] and "parameters" in r["estimate"]["categories"]
    assert r["oom"] is None


@pytest.mark.parametrize("args, field", [(("--batch", "7", "--accum", "2"), "batch"), (("--precision", "fp8"), "precision"),
                                         (("--layers", "many"), "layers")])
def test_cli_bad_arguments_exit_2_with_one_line_naming_the_field(args, field):
    p = _cli("run", "--device", "cpu", *args)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0]


def test_cli_estimate_prints_the_estimate():
    p = _cli("estimate", "--layers", "20", "--width", "2048", "--batch", "32")
    assert p.returncode == 0
    e = json.loads(p.stdout)
    assert e["categories"]["parameters"] == 20 * (2048 * 2048 + 2048) * 4
    assert e["method"] == "replay"


def test_cli_estimate_help_names_what_it_prints(capsys):
    """The estimate command prints the replay's figure; its help used to call it the analytical estimate."""
    from experiments.cli import main

    for args in (["--help"], ["estimate", "--help"]):
        with pytest.raises(SystemExit):
            main(args)
        text = " ".join(capsys.readouterr().out.split())
        assert "replay" in text and "analytical estimate" not in text, (args, text)


def _wait(client, job, timeout=240):
    t = time.time()
    while client.status(job)["state"] in ("queued", "running"):
        assert time.time() - t < timeout
        time.sleep(0.1)
    return client.status(job)


def test_worker_runs_in_a_spawned_process_dedupes_and_caches():
    c = WorkerClient(inline=False)
    # The device view comes from the worker, so the web server never needs a CUDA context.
    assert c.device_info()["type"] == "cpu"
    params = dict(device="cpu", layers=2, width=32, batch=8, steps=2, timing_steps=0)
    a, b = c.submit("run", params), c.submit("run", params)
    # An identical queued job is joined, not run twice: two tickets, one job, one result.
    assert a != b and c._tickets[a] == c._tickets[b]
    assert _wait(c, a)["state"] == "done"
    assert c.status(b)["result"] is c.status(a)["result"]
    again = c.status(c.submit("run", params))
    assert again["state"] == "done" and again["cached"]
    bad = _wait(c, c.submit("run", dict(params, batch=7, accum=2)))
    assert bad["state"] == "error" and "batch" in bad["error"]


def test_inline_worker_cancel_of_a_queued_job():
    c = WorkerClient(inline=True)
    slow = c.submit("run", dict(device="cpu", layers=4, width=256, batch=64, steps=3, timing_steps=20))
    queued = c.submit("leak", dict(scenario="fixed", steps=2, device="cpu", batch=8, width=16))
    c.cancel(queued)
    assert c.status(queued)["state"] == "cancelled"
    c.cancel(slow)
    assert _wait(c, slow)["state"] in ("cancelled", "done")


def test_one_shared_client_per_server_process():
    from experiments.jobs.worker import shared_client

    assert shared_client() is shared_client()


def test_finished_jobs_expire_and_ids_never_repeat(monkeypatch):
    import time

    from experiments.jobs import worker

    client = worker.WorkerClient(inline=True)
    first = client.submit("leak", {"scenario": "fixed", "steps": 2, "device": "cpu", "batch": 8, "width": 16})
    deadline = time.time() + 60
    while client.status(first)["state"] != "done":
        assert time.time() < deadline
        time.sleep(0.05)
    monkeypatch.setattr(worker, "JOB_TTL_S", 0.0)
    second = client.submit("leak", {"scenario": "fixed", "steps": 2, "device": "cpu", "batch": 8, "width": 16})
    assert second != first and client.status(second)["cached"]  # served from the bounded result cache
    assert client.status(first)["error"] == "unknown job"  # the finished job's entry is gone
    assert len(client._jobs) == 1
    assert worker.WorkerClient(inline=True).submit("leak", {"scenario": "fixed", "steps": 2}) != first


def test_the_worker_exits_when_its_server_is_killed(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "server.py"
    script.write_text(
        "import sys, time\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from experiments.jobs.worker import WorkerClient\n"
        "if __name__ == '__main__':  # the worker is spawned: it re-imports this file\n"
        "    c = WorkerClient(inline=False)\n"
        "    assert c.device_info(timeout=120)\n"
        "    print(c._proc.pid, flush=True)\n"
        "    time.sleep(600)\n")
    server = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    worker_pid = int(server.stdout.readline())
    os.kill(server.pid, signal.SIGKILL)
    server.wait()
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            os.kill(worker_pid, 0)
        except ProcessLookupError:
            return
        try:
            os.waitpid(worker_pid, os.WNOHANG)  # reaped by init normally; harmless otherwise
        except ChildProcessError:
            pass
        time.sleep(0.2)
    raise AssertionError("the worker outlived its killed server")


def test_a_second_worker_on_the_same_gpu_is_detected(monkeypatch, tmp_path):
    import tempfile

    import torch

    from experiments.jobs import worker

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert worker._claim_device()  # the first server's worker holds the lock
    first = worker._device_lock
    assert not worker._claim_device()  # a second one is told, and says so in its device report
    worker._device_lock.close()
    first.close()


def test_a_joined_run_stops_only_when_its_last_learner_cancels():
    import time

    from experiments.jobs import worker

    client = worker.WorkerClient(inline=True)
    blocker = {"device": "cpu", "layers": 8, "width": 1024, "batch": 1024, "steps": 10, "timing_steps": 50}
    first = client.submit("run", blocker)  # keeps the queue busy
    tiny = {"scenario": "fixed", "steps": 2, "device": "cpu", "batch": 8, "width": 16}
    a, b = client.submit("leak", tiny), client.submit("leak", tiny)
    assert a != b  # each learner gets a ticket of their own for the one joined job
    client.cancel(a)
    assert client.status(b)["state"] == "queued"  # b still waits for it
    client.cancel(b)
    assert client.status(b)["state"] == "cancelled"
    client.cancel(first)
    deadline = time.time() + 120
    while client.status(first)["state"] not in ("cancelled", "done"):
        assert time.time() < deadline
        time.sleep(0.05)
    assert client.status(first)["state"] == "cancelled"
