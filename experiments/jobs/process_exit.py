"""The lab's child processes stopped when the server exits, before Python's own exit handlers run.

Why first: at exit multiprocessing unlinks the semaphores of the queues it made (a finalizer) and only then terminates
its daemonic children. A child still starting then (a spare worker or an estimate process spawned a moment before a
server's Ctrl-C) fails to rebuild its queue's semaphore and prints a FileNotFoundError traceback in the operator's
terminal. Stopped here, it never gets that far. atexit runs its handlers last registered first: this module registers
after multiprocessing.util has registered its own.
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing.util  # noqa: F401 - its exit handler is registered before ours, so ours runs first
import weakref

_live: weakref.WeakSet = weakref.WeakSet()


def stop_at_exit(owner) -> None:
    """`owner.stop()` stops its processes when the interpreter exits (kept weakly: an owner gone is not stopped)."""
    _live.add(owner)


def _stop_all() -> None:
    for owner in list(_live):
        with contextlib.suppress(Exception):
            owner.stop()


atexit.register(_stop_all)
