"""The cancel flag a job shares with its worker process: seen across processes, and never a lock a killed worker can
keep (multiprocessing's Event was; the server's next clear() then waited forever and the class's queue stalled)."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal

from experiments.jobs.lanes import CancelFlag


def _set_then_wait(flag: CancelFlag) -> None:
    flag.set()
    signal.pause()


def test_a_cancel_set_in_one_process_is_seen_in_the_other_and_survives_a_kill():
    ctx = mp.get_context("spawn")
    flag = CancelFlag(ctx)
    assert not flag.is_set()
    child = ctx.Process(target=_set_then_wait, args=(flag,), daemon=True)
    child.start()
    for _ in range(600):
        if flag.is_set():
            break
        child.join(0.05)
    assert flag.is_set()
    os.kill(child.pid, signal.SIGKILL)
    child.join(10)
    flag.clear()  # a dead process holds nothing this needs
    assert not flag.is_set()
