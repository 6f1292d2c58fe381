"""The command line's stderr as a test reads it: without the progress lines that a slow or busy machine adds to long
work (experiments/cli_progress.py), so that "one line" means the one line the learner is told."""

from __future__ import annotations

import re

# Heartbeat's "estimating preset:gpt2: 4 s" and TerminalProgress' "[2/9] forward   3.1 s".
PROGRESS = re.compile(r"estimating \S.*: \d+ s|\[\s*\d+/\d+\] .* \d+\.\d s")


def said(stderr: str) -> str:
    return "".join(line for line in stderr.splitlines(keepends=True) if not PROGRESS.fullmatch(line.rstrip("\n")))
