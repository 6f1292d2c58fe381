"""Progress of a long run on a terminal: one line on stderr per phase (stdout keeps the result, e.g. --json), only
once the run has taken longer than `after` seconds, so a quick run prints nothing extra."""

from __future__ import annotations

import sys
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
