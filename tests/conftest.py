"""The seed of the tests that draw random configurations: a grid too slow to run whole on every run draws a few of
its configurations per run, from a seed that changes every day (so over the days the grid is covered) and is
printed in the session's header and summary, so a failure can be repeated with GML_TEST_SEED=<seed>."""

from __future__ import annotations

import datetime as _dt
import os
import sys
from pathlib import Path

import pytest

SEED_ENV = "GML_TEST_SEED"


def pytest_configure(config):
    # Set once, before xdist starts its workers: they inherit it, so every worker draws from the same seed even
    # when the run crosses midnight.
    os.environ.setdefault(SEED_ENV, str(_dt.datetime.now(_dt.timezone.utc).date().toordinal()))


def _seed_line() -> str:
    return f"random-grid seed: {os.environ[SEED_ENV]} (today's date; {SEED_ENV}=<seed> repeats this run's draw)"


def pytest_report_header(config):
    return _seed_line()


def pytest_terminal_summary(terminalreporter):
    # Also under -q, which leaves out the header: a failure of a drawn configuration needs its seed to be repeated.
    terminalreporter.write_line(_seed_line())
    if os.environ.get(ROTATION_ENV, "turns") == "turns":
        turns, count = _slow_tests()
        today = _today(count)
        terminalreporter.write_line(
            f"slow tests: today's share ran, {sum(t == today for t in turns.values())} of {len(turns)} (turn "
            f"{today + 1} of {count}, tests/slow_tests.tsv; the others are deselected); {ROTATION_ENV}=all runs all"
        )


@pytest.fixture(autouse=True)
def _main_module_kept():
    """Streamlit's AppTest installs its script as `__main__` and never puts the real one back; a process that
    multiprocessing spawns afterwards in the same test process runs that script first and dies (NameError: __args),
    so a worker or estimate test failed whenever a page test had run before it in its pytest-xdist process."""
    main = sys.modules.get("__main__")
    yield
    if main is not None:
        sys.modules["__main__"] = main


@pytest.fixture(scope="session")
def grid_seed() -> int:
    value = os.environ[SEED_ENV]
    try:
        return int(value)
    except ValueError:
        raise pytest.UsageError(f"{SEED_ENV}: got {value!r}; allowed: an integer") from None


# The slow tests (tests/slow_tests.tsv, written by tests/slow_tests.py from measured durations) run in turns: a run
# takes the day's share of them (the day is the seed's), so over the turns every one runs and a day's run stays
# within CI's few minutes. GML_TEST_ROTATION=all runs them all (before a release); GML_TEST_SEED=<seed> repeats the
# share, and the draw, of the day that seed names.
ROTATION_ENV = "GML_TEST_ROTATION"
SLOW_TESTS = Path(__file__).with_name("slow_tests.tsv")


def _rows() -> list[tuple[str, float, int]]:
    rows = (line.rsplit("\t", 2) for line in SLOW_TESTS.read_text(encoding="utf-8").splitlines() if line[:1] != "#")
    return [(test, float(seconds), int(turn)) for test, seconds, turn in rows if test]


def _slow_tests() -> tuple[dict[str, int], int]:
    turns = {test: turn for test, _seconds, turn in _rows()}
    return turns, max(turns.values(), default=0) + 1


def _row(nodeid: str, table: dict, default):
    """A test's own row, else its file's (a file dealt whole), else `default`."""
    return table.get(nodeid, table.get(nodeid.split("::")[0], default))


def _turn(nodeid: str, turns: dict[str, int], today: int) -> int:
    """A test in no row runs every day."""
    return _row(nodeid, turns, today)


def _today(count: int) -> int:
    return int(os.environ[SEED_ENV]) % count


def pytest_collection_modifyitems(config, items):
    mode = os.environ.get(ROTATION_ENV, "turns")
    if mode not in ("turns", "all"):
        raise pytest.UsageError(f"{ROTATION_ENV}: got {mode!r}; allowed: 'turns' (the default) or 'all'")
    if mode == "all":
        return
    turns, count = _slow_tests()
    today = _today(count)
    later = [item for item in items if _turn(item.nodeid, turns, today) != today]
    if later:
        config.hook.pytest_deselected(items=later)
        items[:] = [item for item in items if _turn(item.nodeid, turns, today) == today]
    # The day's slow tests first, the longest first: a long test started last would leave the other worker idle.
    seconds = {test: sec for test, sec, _turn in _rows()}
    items.sort(key=lambda item: -_row(item.nodeid, seconds, 0.0))
