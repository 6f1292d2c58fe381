"""A data-parallel run's processes (experiments/distributed/launch.py): a dead rank is seen from its exit, not from
gloo's two-minute timeout; the launcher and its ranks never outlive the process that started them, and end quietly;
a launch whose ranks cannot fit is refused before any rank starts.

Cheap on a loaded CPU: the ranks are killed or stopped seconds after they start; the bounds are generous (tens of
seconds) and still far below what the old behaviour took (gloo's 120 s, or the whole run).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments.core.config import DistributedConfig
from experiments.distributed import fit_check, launch, launcher
from experiments.measure.fits import WouldNotFit

ROOT = Path(__file__).resolve().parents[2]
TINY = {"model": "mlp", "layers": 2, "width": 64, "batch": 8, "steps": 3, "timing_steps": 1, "device": "cpu"}
LONG = {"model": "mlp", "layers": 8, "width": 1024, "batch": 256, "steps": 50, "timing_steps": 50, "device": "cpu"}


def _procs() -> list[dict]:
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z":
            out.append({"pid": int(d.name), "ppid": int(fields[1]), "pgrp": int(fields[2]), "cmd": cmd})
    return out


def _ranks_of(parent: int) -> list[int]:
    """Spawned ranks run multiprocessing's spawn_main; forked ones (the launcher's, on a CPU) its own command line."""
    procs = _procs()
    own = next((p["cmd"] for p in procs if p["pid"] == parent), None)
    return [p["pid"] for p in procs if p["ppid"] == parent and ("spawn_main" in p["cmd"] or p["cmd"] == own)]


def _group_alive(pgrp: int) -> bool:
    return any(p["pgrp"] == pgrp for p in _procs())


def _wait(cond, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    return False


def test_a_dead_rank_is_seen_from_its_exit_not_from_gloos_timeout():
    # A run long enough that the kill lands while the ranks work (a tiny one can be done before the kill).
    plans = [DistributedConfig.from_dict(LONG | {"world_size": 2, "strategy": "ddp"}).to_dict()]
    killed = []
    # Spawned children this test process had before (another test's worker or estimate processes) are not ranks.
    others = set(_ranks_of(os.getpid()))

    def ranks() -> list[int]:
        return [pid for pid in _ranks_of(os.getpid()) if pid not in others]

    def kill_a_rank():  # called by the launcher's loop every 0.1 s: kill one rank as soon as it exists
        if not killed:
            ranks_now = ranks()
            if len(ranks_now) == 2:
                os.kill(ranks_now[1], signal.SIGKILL)
                killed.append(time.monotonic())
        return False

    got = launch._spawn(plans, "cpu", should_cancel=kill_a_rank)
    assert killed, "the ranks never started"
    took = time.monotonic() - killed[0]
    # the survivor waits at the rendezvous for a peer that will never come: before, until gloo's 120 s timeout
    assert took < 40, f"the dead rank was noticed after {took:.0f} s"
    assert got[0]["errors"] and not got[0]["cancelled"]
    # The rank that died is named for what happened to it, not by its survivor's gloo error about it.
    assert got[0]["died"] == [1] and got[0]["errors"][1].startswith("the process died (killed by SIGKILL)")
    assert _wait(lambda: not ranks(), 10)


def test_the_launcher_and_its_ranks_end_quietly_with_the_process_that_started_them(tmp_path):
    """The worker killed at max_job_seconds (or by the OOM killer): its launcher and ranks are gone in seconds,
    with no BrokenPipeError; before, they ran the whole run beside the next job."""
    plans = json.dumps([DistributedConfig.from_dict(LONG | {"world_size": 2, "strategy": "ddp"}).to_dict()])
    starter = (
        "import os, subprocess, sys, time\n"
        "env = dict(os.environ, GPU_MEMORY_LAB_LAUNCHER_PARENT=str(os.getpid()))\n"
        "p = subprocess.Popen([sys.executable, '-m', 'experiments.distributed.launch', 'cpu'], stdin=subprocess.PIPE,"
        " stdout=subprocess.PIPE, text=True, start_new_session=True, env=env)\n"
        "p.stdin.write(sys.argv[1]); p.stdin.close()\n"
        "print(p.pid, flush=True)\n"
        "p.stdout.readline()\n"  # the first progress line: the ranks measure
        "print('running', flush=True)\n"
        "time.sleep(600)\n"
    )
    stderr = (tmp_path / "stderr").open("w")
    parent = subprocess.Popen(
        [sys.executable, "-c", starter, plans],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    try:
        launcher = int(parent.stdout.readline())
        assert parent.stdout.readline().strip() == "running"
        assert len(_ranks_of(launcher)) == 2
        # On a CPU they are forks of the launcher, which has imported torch once for both (not spawned: each would
        # import it again, both at once on the same cores).
        assert not [p for p in _procs() if p["ppid"] == launcher and "spawn_main" in p["cmd"]]
        parent.kill()
        parent.wait()
        killed = time.monotonic()
        assert _wait(lambda: not _group_alive(launcher), 20), "the launcher or a rank outlived its parent"
        assert time.monotonic() - killed < 20
    finally:
        parent.kill()
        for p in _procs():
            if p["pgrp"] == parent.pid or (p["pgrp"] != os.getpgrp() and "experiments.distributed.launch" in p["cmd"]):
                with __import__("contextlib").suppress(ProcessLookupError):
                    os.killpg(p["pgrp"], signal.SIGKILL)
    time.sleep(0.5)
    text = (tmp_path / "stderr").read_text()
    assert "BrokenPipeError" not in text and "Traceback" not in text, text[-2000:]


def test_a_launcher_kept_warm_ends_quietly_when_its_worker_stops():
    """A launcher kept warm waits on stdin; the server stopping closes it with nothing written. It ends without a
    traceback in the server's log (it printed a JSONDecodeError there, unrelated to anything the operator did)."""
    done = subprocess.run(
        [sys.executable, "-m", "experiments.distributed.launch", "cpu"],
        input="",
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        timeout=120,
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]


def test_a_launcher_kept_warm_runs_the_next_launch_and_another_waits_after_it(monkeypatch):
    """The classroom worker keeps one launcher waiting with torch imported (about 4 s of a laptop CPU per run): the
    next launch's ranks are that launcher's, and after the run a fresh one waits for the one after."""
    monkeypatch.setattr(launcher, "_warm", {})
    monkeypatch.setattr(launcher, "_keeping_warm", False)
    launcher.keep_warm("cpu")
    warm = launcher._warm["cpu"]
    plans = [DistributedConfig.from_dict(TINY | {"world_size": 2, "strategy": "ddp"}).to_dict()]
    seen: list[int] = []

    def look():  # called every 0.1 s while the launch runs
        seen.append(len(_ranks_of(warm.pid)))
        return False

    try:
        got = launcher.spawn_via_child(plans, "cpu", should_cancel=look)
        assert not got[0]["errors"] and sorted(got[0]["results"]) == [0, 1]
        assert 2 in seen, f"the warm launcher's children while it ran: {seen}"
        assert warm.wait(10) == 0
        after = launcher._warm["cpu"]
        assert after is not warm and after.poll() is None
    finally:
        for proc in launcher._warm.values():
            launcher.stop_group(proc)


def test_a_launch_no_rank_can_hold_is_refused_before_any_rank_starts(monkeypatch):
    # world size 8 of a model whose every rank needs more than the machine has free: one message, not 8 OOM kills
    big = {"model": "mlp", "layers": 16, "width": 4096, "batch": 64, "device": "cpu", "world_size": 8}
    monkeypatch.setattr(fit_check, "cpu_available_bytes", lambda: 4 * 2**30)
    monkeypatch.setattr(launch, "_spawn", lambda *a, **k: pytest.fail("ranks were started"))
    with pytest.raises(WouldNotFit) as refused:
        launch.run_distributed(big | {"strategy": "ddp"})
    assert refused.value.code == "host_memory" and "8 ranks" in str(refused.value)
    assert refused.value.params["peak_bytes"] > refused.value.params["available_bytes"] == 4 * 2**30
    # on GPUs each rank against its own device's free memory
    monkeypatch.setattr(fit_check, "gpu_free_bytes", lambda world: [80 * 2**30] * (world - 1) + [2**30])
    dcfg = DistributedConfig.from_dict(big | {"device": "auto", "strategy": "fsdp2_zero3"})
    est = {"peak_bytes": 3 * 2**30}
    with pytest.raises(WouldNotFit) as on_gpu:
        fit_check.check_ranks_fit(dcfg, est, "cuda")
    assert on_gpu.value.code == "capacity" and "GPU 7" in str(on_gpu.value)
    fit_check.check_ranks_fit(dcfg, {"peak_bytes": 2**30}, "cuda")  # one that fits goes on


def test_the_rank_that_died_is_named_before_the_survivors_complaints():
    got = {"errors": {0: "RuntimeError: gloo: Connection closed by peer", 3: "the process died (killed by SIGKILL)"}}
    assert launch.errors_in_order(got | {"died": [3]}) == [
        "rank 3: the process died (killed by SIGKILL)",
        "rank 0: RuntimeError: gloo: Connection closed by peer",
    ]
    assert launch.errors_in_order(got)[0].startswith("rank 0")  # no death: rank order
