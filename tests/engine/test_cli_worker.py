import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from experiments import cli
from experiments.jobs.worker import WorkerClient
from tests.engine.cli_output import said

ROOT = Path(__file__).resolve().parents[2]


def _cli(capsys, *args, progress: bool = False) -> tuple[int, str, str]:
    """`python -m experiments ARGS` in this process: (exit status, stdout, stderr less its progress lines unless
    `progress`)."""
    try:
        code = cli.main(list(args))
    except SystemExit as stop:  # argparse's own errors and --help
        code = stop.code
    out = capsys.readouterr()
    return code, out.out, out.err if progress else said(out.err)


def test_cli_json_is_the_run_itself(capsys):
    code, out, err = _cli(
        capsys,
        "run",
        "--device",
        "cpu",
        "--layers",
        "2",
        "--width",
        "64",
        "--batch",
        "8",
        "--steps",
        "2",
        "--timing-steps",
        "2",
        "--json",
    )
    assert code == 0, err
    r = json.loads(out)
    params = 2 * (64 * 64 + 64) * 4
    assert r["config"]["layers"] == 2 and r["device"]["type"] == "cpu" and r["oom"] is None
    assert [p["phase"] for p in r["phases"][:3]] == ["model", "optimizer", "data"]
    assert r["phases"][0]["allocated_bytes"] == params == r["breakdown_steady"]["parameters"]
    assert r["estimate"]["peak_bytes"] == r["peak_bytes"]  # on a CPU the replay is the measurement
    assert len(r["step_ms"]["samples"]) == 2 and r["step_ms"]["p10"] <= r["step_ms"]["median"] <= r["step_ms"]["p90"]


def test_cli_prints_the_phase_table(capsys):
    code, out, _ = _cli(
        capsys,
        "run",
        "--device",
        "cpu",
        "--layers",
        "1",
        "--width",
        "512",
        "--batch",
        "4",
        "--steps",
        "2",
        "--timing-steps",
        "0",
    )
    assert code == 0
    rows = [line.split() for line in out.splitlines() if line.split()[:1] in (["0"], ["1"], ["2"])]
    assert [r[1] for r in rows] == ["model", "optimizer", "data"] + [
        "zero_grad",
        "forward",
        "backward",
        "optimizer_step",
    ] * 2
    assert rows[0][2] == f"{(512 * 512 + 512) * 4 / 2**20:.2f}" == "1.00"  # after the model phase, in MiB


@pytest.mark.parametrize(
    "args, field",
    [
        (("--batch", "7", "--accum", "2"), "batch"),
        (("--precision", "fp8"), "precision"),
        (("--layers", "many"), "layers"),
        (("--steps",), "--steps"),
    ],
)
def test_cli_bad_arguments_exit_2_with_one_line_naming_the_field(capsys, args, field):
    code, _, err = _cli(capsys, "run", "--device", "cpu", *args)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and field in lines[0]


def test_cli_estimate_prints_a_summary_and_json_on_request(capsys):
    args = ("estimate", "--layers", "20", "--width", "2048", "--batch", "32")
    code, out, _ = _cli(capsys, *args)
    params_mib = 20 * (2048 * 2048 + 2048) * 4 / 2**20
    assert code == 0 and len(out.splitlines()) <= 12, out  # a person's summary, not 130 lines of JSON
    assert "estimated peak" in out and f"{params_mib:,.1f} MiB" in out
    code, out, _ = _cli(capsys, *args, "--json")
    assert code == 0
    e = json.loads(out)
    assert e["categories"]["parameters"] == 20 * (2048 * 2048 + 2048) * 4
    assert e["method"] == "replay" and e["device_type"] == "cpu"
    assert {t["category"] for t in e["terms"]} == set(e["categories"])


def test_cli_leak_help_lists_the_scenarios_and_refuses_an_unknown_one(capsys):
    from experiments.core.leak_scenarios import DEFAULTS, LIMITS
    from experiments.labs.leaks import SCENARIOS

    code, out, _ = _cli(capsys, "leak", "--help")
    text = " ".join(out.split())
    assert code == 0 and all(name in text for name in SCENARIOS), text
    for name in ("steps", "batch", "width"):  # every number says its range and default
        lo, hi = LIMITS[name]
        assert f"{lo}-{hi}; default {DEFAULTS[name]}" in text, name
    code, _, err = _cli(capsys, "leak", "--scenario", "nope")
    assert code == 2 and "nope" in err


def test_cli_guard_exits_1_when_the_gradients_differ(capsys, monkeypatch):
    from experiments.training import guard

    for ok, expected in ((True, 0), (False, 1)):
        verdict = {"ok": ok, "max_rel_diff": 0.5, "max_abs_diff": 0.25, "tolerance": 1e-4, "precision": "fp32"}
        verdict |= {"baseline_precision": "fp32_strict", "checkpoint": "none", "accum": 1}
        monkeypatch.setattr(guard, "check_gradients", lambda cfg, v=verdict: v)
        code, out, _ = _cli(capsys, "guard", "--layers", "2", "--width", "64", "--batch", "8", "--json")
        assert code == expected and json.loads(out)["ok"] is ok
        code, out, _ = _cli(capsys, "guard", "--layers", "2", "--width", "64", "--batch", "8")
        said = "gradients match" if ok else "gradients DIFFER from"
        assert code == expected and out.startswith(said) and "0.25" in out and out.count("\n") == 1


def test_cli_leak_says_in_one_line_what_the_loop_keeps_per_step(capsys):
    code, out, _ = _cli(
        capsys, "leak", "--scenario", "append_loss_after_backward", "--steps", "3", "--batch", "8", "--width", "16"
    )
    # mse_loss keeps its (batch, width) fp32 buffer per step: 8 x 16 x 4 bytes = 0.5 KiB
    assert code == 0 and out.count("\n") == 1 and "grows 512 B per step over 3 steps" in out, out
    code, out, _ = _cli(capsys, "leak", "--scenario", "fixed", "--steps", "3", "--batch", "8", "--width", "16")
    assert code == 0 and "does not grow over 3 steps" in out, out


def test_cli_docstring_names_exactly_its_subcommands(capsys):
    """The module's first line lists the subcommands that `--help` offers (it named a `record` that did not exist)."""
    code, out, _ = _cli(capsys, "--help")
    offered = set(re.search(r"\{([a-z_,-]+)\}", out).group(1).split(","))
    listed = set(cli.__doc__.split("`")[1].removeprefix("python -m experiments ").split("|"))
    assert code == 0 and listed == offered, (listed, offered)


def test_cli_estimate_help_names_what_it_prints(capsys):
    """The estimate command prints the replay's figure; its help used to call it the analytical estimate."""
    for args in (["--help"], ["estimate", "--help"]):
        code, out, _ = _cli(capsys, *args)
        text = " ".join(out.split())
        assert code == 0 and "replay" in text and "analytic" not in text, (args, text)


def _wait(client, job, timeout=240):
    t = time.time()
    while client.status(job)["state"] in ("queued", "running"):
        assert time.time() - t < timeout
        time.sleep(0.1)
    return client.status(job)


LONG = {"device": "cpu", "layers": 4, "width": 512, "batch": 256, "steps": 2, "timing_steps": 200}


def _running(client, ticket, timeout=120):
    deadline = time.time() + timeout
    while client.status(ticket)["state"] != "running" or not client.status(ticket)["progress"]:
        assert time.time() < deadline, client.status(ticket)
        time.sleep(0.05)


def test_worker_runs_in_a_spawned_process_dedupes_and_caches():
    c = WorkerClient(inline=False, rates=False)
    # The device view comes from the worker, so the web server never needs a CUDA context.
    info = c.device_info()
    assert info["type"] == "cpu"
    # One core is left to the web server, which draws pages while a run runs (worker_process.cpu_threads).
    assert info["threads"] == max(1, len(os.sched_getaffinity(0)) - 1)
    params = dict(device="cpu", layers=2, width=32, batch=8, steps=2, timing_steps=0)
    a, b = c.submit("run", params), c.submit("run", params)
    # An identical queued job is joined, not run twice: two tickets, one job, one result.
    assert a != b and c._tickets[a] == c._tickets[b]
    assert _wait(c, a)["state"] == "done"
    # Both tickets are served the run of these parameters (its parameters' bytes counted by hand).
    for ticket in (a, b):
        got = c.status(ticket)
        assert got["state"] == "done" and got["result"]["config"]["width"] == 32
        assert got["result"]["breakdown_steady"]["parameters"] == 2 * (32 * 32 + 32) * 4
    result = c.status(a)["result"]
    assert isinstance(c._jobs[c._tickets[a]]["blob"], bytes)  # one job: one result, held once (pickled)
    again = c.status(c.submit("run", params))
    assert again["state"] == "done" and again["cached"] and again["result"]["started_at"] == result["started_at"]
    bad = _wait(c, c.submit("run", dict(params, batch=7, accum=2)))
    assert bad["state"] == "error" and bad["error"].startswith("ConfigError: batch: batch 7 must be divisible")
    # The error crosses the process boundary as data too.
    assert bad["error_info"] == {
        "type": "ConfigError",
        "code": "batch_accum",
        "params": {"field": "batch", "batch": 7, "accum": 2},
    }


def test_a_worker_process_is_cancelled_stopped_at_its_time_limit_and_restarted_when_it_dies(caplog):
    """One worker process lane: a Cancel reaches a running job; a job past max_job_seconds is killed with its
    worker; a job whose worker dies mid-job runs again in the next worker, and fails if that one dies too; after each, the next job runs in a fresh process."""
    c = WorkerClient(inline=False, rates=False)
    lane = c._lanes[0]
    job = c.submit("run", LONG)
    _running(c, job)
    first = lane.proc.pid
    c.cancel(job)
    cancelled = _wait(c, job)
    assert cancelled["state"] == "cancelled" and cancelled["result"]["cancelled"]
    assert cancelled["error_info"]["type"] == "Cancelled" and lane.proc.pid == first  # the worker lives on

    lane.max_seconds = 1.0
    slow = _wait(c, c.submit("run", dict(LONG, seed=1)))
    assert slow["state"] == "error" and slow["error"] == "stopped after 1 s (max_job_seconds, docs/operators.md)"
    assert slow["error_info"] == {"type": "Timeout", "code": None, "params": {"seconds": 1.0}}
    assert lane.proc.pid != first and lane.proc.is_alive()  # its replacement is started at once
    lane.max_seconds = 600.0

    doomed = c.submit("run", dict(LONG, seed=2))
    _running(c, doomed)
    assert lane.proc.pid != first  # restarted after the time limit
    killed = lane.proc.pid
    with caplog.at_level("WARNING", logger="experiments.jobs.lanes"):
        os.kill(killed, signal.SIGKILL)  # the job is run again in the worker that takes its place
        while lane.proc.pid == killed or not c.status(doomed)["progress"]:
            time.sleep(0.05)
        again = lane.proc.pid
        os.kill(again, signal.SIGKILL)  # a second death fails it
        died = _wait(c, doomed)
    assert died["state"] == "error" and died["error_info"] == {"type": "WorkerDied", "code": None, "params": {}}
    assert died["error"].startswith("the worker process died twice")
    # the server's log says so, and how: the page's "see the server log" points somewhere
    said = [r.getMessage() for r in caplog.records if "SIGKILL" in r.getMessage()]
    assert [m for m in said if str(killed) in m and m.endswith("runs the job again")]
    assert [m for m in said if str(again) in m and not m.endswith("runs the job again")]

    after = _wait(c, c.submit("leak", {"scenario": "fixed", "steps": 2, "device": "cpu", "batch": 8, "width": 16}))
    assert after["state"] == "done" and after["result"]["growth_bytes_per_step"] == 0


def test_inline_worker_cancel_of_a_queued_job_and_of_a_running_one():
    c = WorkerClient(inline=True)
    slow = c.submit("run", LONG)
    queued = c.submit("leak", dict(scenario="fixed", steps=2, device="cpu", batch=8, width=16))
    c.cancel(queued)
    assert c.status(queued)["state"] == "cancelled" and c.status(queued)["error_info"]["type"] == "Cancelled"
    _running(c, slow)
    c.cancel(slow)
    stopped = _wait(c, slow)
    assert stopped["state"] == "cancelled" and stopped["result"]["cancelled"] and stopped["result"]["step_ms"] is None


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
    fresh = worker.WorkerClient(inline=True)
    third = fresh.submit("leak", {"scenario": "fixed", "steps": 2, "device": "cpu", "batch": 8, "width": 16})
    assert third not in (first, second)
    assert _wait(fresh, third)["state"] == "done"  # nothing left running in this process's threads


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
        "    c = WorkerClient(inline=False, rates=False)\n"
        "    assert c.device_info(timeout=120)\n"
        "    print(c._proc.pid, flush=True)\n"
        "    time.sleep(600)\n"
    )
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

    from experiments.jobs import worker_process

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert worker_process.claim_device()  # the first server's worker holds the lock
    first = worker_process._device_lock
    assert not worker_process.claim_device()  # a second one is told, and says so in its device report
    worker_process._device_lock.close()
    first.close()


def test_a_joined_run_stops_only_when_its_last_learner_cancels():
    import time

    from experiments.jobs import worker

    client = worker.WorkerClient(inline=True)
    first = client.submit("run", LONG)  # keeps the queue busy
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


def test_a_second_worker_on_the_same_cpu_is_detected(monkeypatch, tmp_path):
    import tempfile

    import torch

    from experiments.jobs import worker_process

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert worker_process.claim_device()  # the first server's CPU worker holds the machine's lock
    first = worker_process._device_lock
    assert not worker_process.claim_device()  # a second server on the same CPU is told (its sidebar says so)
    assert (tmp_path / "gpu-memory-lab-cpu.lock").exists()
    worker_process._device_lock.close()
    first.close()


def test_a_long_cli_run_shows_its_phases_on_stderr_and_keeps_stdout_for_the_result(capsys, monkeypatch):
    import functools
    import io

    from experiments import cli
    from experiments.cli_progress import TerminalProgress

    quiet = io.StringIO()
    p = TerminalProgress(stream=quiet, after=3600)
    p(1, 9, "step 1 forward")
    assert quiet.getvalue() == ""  # a quick run prints nothing extra
    monkeypatch.setattr(cli, "TerminalProgress", functools.partial(TerminalProgress, after=0))
    code, out, err = _cli(
        capsys,
        "run",
        "--device",
        "cpu",
        "--layers",
        "2",
        "--width",
        "32",
        "--batch",
        "4",
        "--steps",
        "2",
        "--timing-steps",
        "0",
        "--json",
        progress=True,
    )
    assert code == 0 and json.loads(out)["peak_bytes"] > 0
    lines = [line for line in err.splitlines() if line.startswith("[")]
    assert lines and said(err) == ""  # every line a phase's, which the other tests leave out
    assert any("forward" in line for line in lines) and any("backward" in line for line in lines)
    labels = [line.split("]", 1)[1].rsplit(None, 2)[0].strip() for line in lines]
    assert all(a != b for a, b in zip(labels, labels[1:], strict=False))  # one line per phase, not per update


def test_the_cuda_estimate_is_given_on_a_machine_without_a_gpu(capsys):
    """An estimate replays on fake tensors on the CPU: a learner without a GPU asks for their card's."""
    import torch

    from experiments.core.config import ExperimentConfig
    from experiments.estimate.estimator import estimate

    code, out, err = _cli(capsys, "estimate", "--device", "cuda", "--layers", "4", "--width", "256", "--batch", "8")
    assert code == 0 and "[replay on cuda]" in out, err
    if not torch.cuda.is_available():  # the command did not need one
        cfg = ExperimentConfig(layers=4, width=256, batch=8, device="cuda")
        peak = estimate(cfg, device_type="cuda")["peak_bytes"]
        assert f"{peak / 2**20:,.1f} MiB" in out


def test_help_and_a_bad_argument_answer_without_importing_torch():
    """torch's import alone takes about 2 s: the command line's help and its one-line errors come first."""
    import subprocess
    import sys

    probe = (
        "import sys\nfrom experiments import cli\ntry:\n    code = cli.main(sys.argv[1:])\nexcept SystemExit as e:\n"
        "    code = e.code\nprint('torch imported' if 'torch' in sys.modules else 'no torch', code, file=sys.stderr)"
    )
    for args in (["--help"], ["run", "--help"], ["leak", "--help"], ["run", "--batch", "0"], ["fits", "--card", "x"]):
        r = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, cwd=ROOT)
        last = r.stderr.strip().splitlines()[-1]
        assert last.startswith("no torch"), (args, r.stderr[-400:])


@pytest.mark.parametrize(
    "args,field",
    [
        (["run", "--model", "transformer", "--model-preset", "gpt2"], "model"),
        (["run", "--tiny"], "tiny"),
        (["estimate", "--model-preset", "gpt2", "--head", "causal_lm"], "head"),
        (["estimate", "--model-type", "bert", "--head", "regression"], "head"),
        (["estimate", "--segments", "4"], "segments"),
        (["estimate", "--segments", "4", "--checkpoint", "per_layer"], "segments"),
        (["fits", "--card", "t4-16gb", "--capacity-gib", "15"], "card"),
        (["fits", "--card", "t4-16gb", "--largest"], "largest"),
    ],
)
def test_flags_that_conflict_or_mean_nothing_are_one_line_naming_the_field(capsys, args, field):
    code, out, err = _cli(capsys, *args)
    assert code == 2 and err.startswith(f"error: {field}: ") and err.count("\n") == 1, err


def test_fits_methods_prints_each_refusal_whole_under_the_table(capsys):
    from experiments.cli_print import print_methods

    why = "cannot be predicted: q_proj.base_layer makes a tensor whose shape depends on the data: int8_vectorwise_quant"
    row = {"peak_bytes": None, "runs": None, "cannot_predict": why}
    print_methods(
        {
            "card": "rtx-4090-24gb",
            "capacity_bytes": 24 * 2**30,
            "overhead_bytes": 2**30,
            "methods": [
                {"finetune": "lora", "checkpoint": "per_layer", "peak_bytes": 2**34, "runs": True},
                {**row, "finetune": "int8", "checkpoint": "none"},
                {**row, "finetune": "int8", "checkpoint": "per_layer"},
            ],
            "first_that_runs": {"finetune": "lora", "checkpoint": "per_layer"},
        }
    )
    out = capsys.readouterr().out.splitlines()
    assert [line for line in out if line.startswith("int8")][0].endswith("not predicted (1)")
    assert out.count(f"(1) {why}") == 1 and not any(line.startswith("(2)") for line in out)


def test_cli_distributed_exit_status_says_a_failed_rank_or_a_differing_update(capsys, monkeypatch):
    """A script must tell a data-parallel run that failed or whose update differs from one device's from one that
    held: exit status 4 for a rank's error, 1 for the update check, 0 otherwise; the same with --json."""
    from experiments.distributed import launch

    base = {"kind": "distributed", "device": {"type": "cpu", "name": "cpu", "torch_version": "x"}, "backend": "gloo"}
    base |= {"strategy": "ddp", "world_size": 2, "per_rank_batch": 4, "global_batch": 8, "ranks": [], "estimate": None}
    cases = [
        ({"errors": [], "update_check": {"ok": True, "max_abs_diff": 0.0, "max_update": 1.0}}, 0),
        ({"errors": [], "update_check": {"ok": False, "max_abs_diff": 0.5, "max_update": 1.0}}, 1),
        ({"errors": ["rank 1: RuntimeError: gloo connection closed"], "update_check": None}, 4),
    ]
    for extra, expected in cases:
        monkeypatch.setattr(launch, "run_distributed", lambda spread, progress=None, r=base | extra: r)
        for json_flag in ([], ["--json"]):
            args = ["distributed", "--device", "cpu", "--world-size", "2", "--layers", "2", "--width", "16", *json_flag]
            code, out, _ = _cli(capsys, *args)
            assert code == expected, (extra, json_flag, out)
