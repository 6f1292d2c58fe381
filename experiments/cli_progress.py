"""Progress of long work on a terminal, on stderr (stdout keeps the result, e.g. --json), only once the work has taken
longer than `after` seconds, so quick work prints nothing extra: one line per phase of a run (TerminalProgress), or for
work without phases to report (an estimate's replays) one line every few seconds (Heartbeat)."""

from __future__ import annotations

import sys
import threading
import time


class TerminalProgress:
    def __init__(self, stream=None, after: float = 2.0):
        self.stream = stream or sys.stderr
        self.after = after
        self.t0 = time.perf_counter()
        self.last = None

    def __call__(self, done: int, total: int, label: str) -> None:
        elapsed = time.perf_counter() - self.t0
        if elapsed < self.after or label == self.last:
            return
        self.last = label
        width = len(str(total))
        print(f"[{done:>{width}}/{total}] {label:<32} {elapsed:7.1f} s", file=self.stream, flush=True)


class Heartbeat:
    """`with Heartbeat("estimating preset:llama3-8b"):` says every `every` seconds, after the first `after`, that the
    work is still going and for how long."""

    def __init__(self, label: str, stream=None, after: float = 2.0, every: float = 5.0):
        self.label, self.stream, self.after, self.every = label, stream or sys.stderr, after, every
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True)

    def _beat(self) -> None:
        t0, wait = time.perf_counter(), self.after
        while not self.done.wait(wait):
            print(f"{self.label}: {time.perf_counter() - t0:.0f} s", file=self.stream, flush=True)
            wait = self.every

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join()
