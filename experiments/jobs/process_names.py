"""Names the lab's processes as `ps`, `top` and /proc/PID/comm show them (Linux; at most 15 bytes), so that an operator
and the load test tell the run worker (gml-worker, one per GPU: gml-worker-1, ...) from the estimate processes
(gml-estimate), a lane's spare worker while it waits (gml-spare) and the data-parallel launcher (gml-launcher), all of
which are `python` otherwise."""

from __future__ import annotations

import ctypes
import ctypes.util

PR_SET_NAME = 15


def name_process(name: str) -> bool:
    """Sets the calling thread's name (the process's, from its main thread); False where the system has no prctl."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        return libc.prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0) == 0
    except (OSError, AttributeError, TypeError):
        return False
