"""The launcher interpreter of a data-parallel run started from a daemonic process (the classroom worker, which
may not have children of its own through multiprocessing): `python -m experiments.distributed.launch`, reading its
plans on stdin and streaming progress and results on stdout; and the one such launcher the worker keeps waiting,
torch imported, for the next run (keep_warm)."""

from __future__ import annotations

import contextlib
import json
import os
import queue as _queue
import signal
import subprocess
import sys
import threading

PARENT_ENV = "GPU_MEMORY_LAB_LAUNCHER_PARENT"
STOP_GRACE_S = 2.0  # after SIGTERM, how long the launcher and its ranks have before SIGKILL

_warm: dict[str, subprocess.Popen] = {}  # device type -> a launcher that has imported torch and waits for plans
_keeping_warm = False
_warm_lock = threading.Lock()


def _start_launcher(device_type: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([_root(), os.environ.get("PYTHONPATH", "")]))
    env[PARENT_ENV] = str(os.getpid())
    return subprocess.Popen(
        [sys.executable, "-m", "experiments.distributed.launch", device_type],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )


def keep_warm(now: str | None = None) -> None:
    """From now on, after each data-parallel run, a launcher of the device type it ran on waits ready for the next
    (torch and the ranks' code imported: about 4 s of a laptop CPU saved per run, for 250 MB of memory); `now`: a
    device type to start one for at once. The classroom worker calls this; a waiting launcher exits with it."""
    global _keeping_warm
    with _warm_lock:
        _keeping_warm = True
        proc = _warm.get(now) if now else None
        if now and (proc is None or proc.poll() is not None):
            _warm[now] = _start_launcher(now)


def _take_launcher(device_type: str) -> subprocess.Popen:
    with _warm_lock:
        proc = _warm.pop(device_type, None)
    if proc is not None and proc.poll() is None:
        return proc
    return _start_launcher(device_type)


def spawn_via_child(plans: list[dict], device_type: str, progress=None, should_cancel=None) -> list[dict]:
    """The same spawn from a fresh interpreter, for callers that may not have children (daemonic processes)."""
    try:
        return _spawn_in(_take_launcher(device_type), plans, progress, should_cancel)
    finally:
        if _keeping_warm:
            keep_warm(device_type)


def _spawn_in(proc: subprocess.Popen, plans: list[dict], progress, should_cancel) -> list[dict]:
    proc.stdin.write(json.dumps(plans))
    proc.stdin.close()
    lines: _queue.Queue = _queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True)
    reader.start()
    got = None
    while reader.is_alive() or not lines.empty():
        try:
            message = json.loads(lines.get(timeout=0.1))
        except _queue.Empty:
            message = None
        except json.JSONDecodeError:
            continue  # a line that is not ours (a library printing to stdout)
        if message and "progress" in message and progress:
            progress(*message["progress"])
        elif message and "got" in message:
            got = message["got"]
        if should_cancel is not None and should_cancel():
            stop_group(proc)
            return [{"results": {}, "update": None, "errors": {}, "cancelled": True} for _ in plans]
    proc.wait()
    if got is None:
        return [
            {
                "results": {},
                "update": None,
                "errors": {-1: f"the launcher exited with status {proc.returncode}"},
                "cancelled": False,
            }
            for _ in plans
        ]
    for g in got:
        g["results"] = {int(k): v for k, v in g["results"].items()}
        g["errors"] = {int(k): v for k, v in g["errors"].items()}
    return got


def stop_group(proc: subprocess.Popen) -> None:
    """The launcher and the ranks it started (its own session): SIGTERM, then SIGKILL after a short grace."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # ranks that ignored SIGTERM, even after the launcher exited
    proc.wait()


def _root() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
