"""One test module at a time on the GPU when the suite runs in several processes (pytest -n): peaks, free memory
and the worker's claim on the device are per GPU, so two modules measuring at once would disturb each other."""

from __future__ import annotations

import fcntl
import tempfile
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def one_gpu_user():
    with open(Path(tempfile.gettempdir()) / "gpu-memory-lab-tests.gpu.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
