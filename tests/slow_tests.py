"""Writes tests/slow_tests.tsv, the tests that run in turns (tests/conftest.py), from a run's measured durations.

    python -m pytest -q -n 2 --dist loadfile --durations=0 | tee durations.log
    python tests/slow_tests.py durations.log

A test whose setup, call and teardown took at least THRESHOLD_S seconds runs on one day of TURNS: the slow tests are
dealt into TURNS shares of about equal time (the longest first, each to the share with the least so far), so each
day's run takes about the same. A test not in the file (a new one) runs every day until the file is written again.
"""

from __future__ import annotations

import collections
import re
import sys
from pathlib import Path

THRESHOLD_S = 2.0
TURNS = 6
OUT = Path(__file__).with_name("slow_tests.tsv")
LINE = re.compile(r"\s*([\d.]+)s (?:call|setup|teardown)\s+(\S.*?)\s*$")


def durations(log: str) -> dict[str, float]:
    seconds: collections.Counter = collections.Counter()
    for line in log.splitlines():
        m = LINE.match(line)
        if m:
            seconds[m.group(2)] += float(m.group(1))
    return dict(seconds)


def deal(seconds: dict[str, float], turns: int = TURNS) -> dict[str, int]:
    load, turn_of = [0.0] * turns, {}
    for test, s in sorted(seconds.items(), key=lambda kv: (-kv[1], kv[0])):
        turn = min(range(turns), key=lambda i: (load[i], i))
        turn_of[test], load[turn] = turn, load[turn] + s
    return turn_of


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/slow_tests.py DURATIONS_LOG (pytest --durations=0 output)")
    seconds = {t: s for t, s in durations(Path(sys.argv[1]).read_text(encoding="utf-8")).items() if s >= THRESHOLD_S}
    if not seconds:
        sys.exit(f"error: {sys.argv[1]} lists no test of {THRESHOLD_S} s or more (was it run with --durations=0?)")
    turn_of = deal(seconds)
    lines = [f"# written by tests/slow_tests.py: tests of >= {THRESHOLD_S} s, in {TURNS} turns; test\tseconds\tturn"]
    lines += [f"{t}\t{seconds[t]:.1f}\t{turn_of[t]}" for t in sorted(seconds)]
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    per_turn = collections.Counter()
    for t, turn in turn_of.items():
        per_turn[turn] += seconds[t]
    print(
        f"{len(seconds)} slow tests, {sum(seconds.values()):.0f} s; per turn: "
        + ", ".join(f"{per_turn[i]:.0f} s" for i in range(TURNS))
    )


if __name__ == "__main__":
    main()
