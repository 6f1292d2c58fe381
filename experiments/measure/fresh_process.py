"""`python -m MODULE JSON` in a new process with the caching allocator's setting a learner would set: the allocator
reads PYTORCH_CUDA_ALLOC_CONF when CUDA starts, and a process that ran anything before holds cached blocks that would
serve the next requests. Used by the fragmentation lab and by the trials of `fits --measure`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_module(
    module: str, arg: dict, expandable: bool, timeout: float, device_index: int | None = None
) -> subprocess.CompletedProcess:
    """The finished process (stdout, stderr, returncode); `device_index`: the one GPU the child sees, as this process
    numbers them. Raises subprocess.TimeoutExpired."""
    env = dict(
        os.environ,
        PYTORCH_CUDA_ALLOC_CONF=f"expandable_segments:{'True' if expandable else 'False'}",
        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
        PYTHONUNBUFFERED="1",
    )
    if device_index is not None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        env["CUDA_VISIBLE_DEVICES"] = visible.split(",")[device_index] if visible else str(device_index)
    return subprocess.run(
        [sys.executable, "-m", module, json.dumps(arg)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
