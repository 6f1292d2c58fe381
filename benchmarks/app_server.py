"""The app as a learner's browser meets it: `streamlit run app/main.py`, headless, on a free loopback port.

    with app_server.running() as (base_url, server):
        ...  # open base_url + "/monitoring?lang=en"

Shared by the benchmarks that drive a real browser (load_test.py, first_page.py, cpu_speed.py), so that each measures
the same server the same way. The server is stopped on leaving, also when the benchmark fails.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def command(port: int) -> list[str]:
    """The streamlit command line: no file watcher (a benchmark edits nothing) and no usage statistics sent."""
    return [
        str(Path(sys.executable).parent / "streamlit"),
        "run",
        "app/main.py",
        "--server.headless",
        "true",
        "--server.address",
        "127.0.0.1",
        "--server.port",
        str(port),
        "--browser.gatherUsageStats",
        "false",
        "--server.fileWatcherType",
        "none",
    ]


def wait_healthy(base_url: str, server: subprocess.Popen, timeout_s: float) -> None:
    """Until /_stcore/health answers; a server that exits or stays silent for `timeout_s` is an error."""
    t0 = time.monotonic()
    while True:
        try:
            with urllib.request.urlopen(base_url + "/_stcore/health", timeout=2):
                return
        except OSError:
            if server.poll() is not None:
                raise RuntimeError(f"the server exited with status {server.returncode} before answering") from None
            if time.monotonic() - t0 > timeout_s:
                raise RuntimeError(
                    f"the server did not answer {base_url}/_stcore/health in {timeout_s:.0f} s"
                ) from None
            time.sleep(0.05)


def stop(server: subprocess.Popen, grace_s: float = 15.0) -> None:
    """SIGTERM, and a kill if it has not exited after `grace_s` seconds."""
    if server.poll() is not None:
        return
    server.terminate()
    try:
        server.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait(timeout=grace_s)


@contextlib.contextmanager
def running(timeout_s: float = 60.0, env: dict | None = None) -> Iterator[tuple[str, subprocess.Popen]]:
    """Starts the app, waits until it is healthy, yields (base_url, server process), and stops it."""
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(command(port), cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_healthy(base_url, server, timeout_s)
        yield base_url, server
    finally:
        stop(server)
