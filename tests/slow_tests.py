"""Writes tests/slow_tests.tsv, the tests that run in turns (tests/conftest.py), from a run's measured durations.

    python -m pytest -q -n 2 --dist worksteal --durations=0 | tee durations.log
    python tests/slow_tests.py durations.log [more.log ...]

(A later log adds only the tests the first one lacks: a test a run did not list.)

A test whose setup, call and teardown took at least THRESHOLD_S seconds runs on one day of TURNS: the slow tests are
dealt into TURNS shares of about equal time (the longest first, each to the share with the least so far), so each
day's run takes about the same. A test not in the file (a new one) runs every day until the file is written again.

A file where one test's setup alone took THRESHOLD_S or more, and more than any test's call (a module fixture: gloo
ranks), is dealt whole, as one row named by the file: its fast tests need that fixture too, so they would pay for it
every day.
"""

from __future__ import annotations

import collections
import re
import sys
from pathlib import Path

THRESHOLD_S = 2.0
TURNS = 12
OUT = Path(__file__).with_name("slow_tests.tsv")
LINE = re.compile(r"\s*([\d.]+)s (call|setup|teardown)\s+(\S.*?)\s*$")


def durations(log: str) -> dict[str, float]:
    seconds: collections.Counter = collections.Counter()
    for line in log.splitlines():
        m = LINE.match(line)
        if m:
            seconds[m.group(3)] += float(m.group(1))
    return dict(seconds)


def slow_setup_files(log: str) -> set[str]:
    """Files where some test's setup alone took THRESHOLD_S or more, and more than any test's call there: a fixture
    that costs more than the tests it serves (a browser server's few seconds under two long page walks do not)."""
    setup: collections.Counter = collections.Counter()
    call: collections.Counter = collections.Counter()
    for m in filter(None, map(LINE.match, log.splitlines())):
        file, s = m.group(3).split("::")[0], float(m.group(1))
        table = setup if m.group(2) == "setup" else call
        table[file] = max(table[file], s)
    return {f for f, s in setup.items() if s >= THRESHOLD_S and s > call[f]}


def units(log: str) -> dict[str, float]:
    """What is dealt, with its seconds: each slow test, and each file with a slow setup whole."""
    seconds, whole = durations(log), slow_setup_files(log)
    out: collections.Counter = collections.Counter()
    for test, s in seconds.items():
        file = test.split("::")[0]
        if file in whole:
            out[file] += s
        elif s >= THRESHOLD_S:
            out[test] += s
    return dict(out)


def deal(seconds: dict[str, float], turns: int = TURNS) -> dict[str, int]:
    load, turn_of = [0.0] * turns, {}
    for test, s in sorted(seconds.items(), key=lambda kv: (-kv[1], kv[0])):
        turn = min(range(turns), key=lambda i: (load[i], i))
        turn_of[test], load[turn] = turn, load[turn] + s
    return turn_of


def merged(logs: list[str]) -> str:
    """The first log, with the lines of later logs for tests the first does not name."""
    seen = set(durations(logs[0]))
    extra = [
        line for log in logs[1:] for line in log.splitlines() if (m := LINE.match(line)) and m.group(3) not in seen
    ]
    return "\n".join([logs[0], *extra])


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: python tests/slow_tests.py DURATIONS_LOG [MORE_LOGS...] (pytest --durations=0 output)")
    seconds = units(merged([Path(a).read_text(encoding="utf-8") for a in sys.argv[1:]]))
    if not seconds:
        sys.exit(f"error: {sys.argv[1]} lists no test of {THRESHOLD_S} s or more (was it run with --durations=0?)")
    turn_of = deal(seconds)
    lines = [
        f"# written by tests/slow_tests.py: tests of >= {THRESHOLD_S} s and files whose setup is, in {TURNS} turns; "
        "test or file\tseconds\tturn"
    ]
    lines += [f"{t}\t{seconds[t]:.1f}\t{turn_of[t]}" for t in sorted(seconds)]
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    per_turn = collections.Counter()
    for t, turn in turn_of.items():
        per_turn[turn] += seconds[t]
    print(
        f"{len(seconds)} slow tests and files, {sum(seconds.values()):.0f} s; per turn: "
        + ", ".join(f"{per_turn[i]:.0f} s" for i in range(TURNS))
    )


if __name__ == "__main__":
    main()
