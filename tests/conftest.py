"""The seed of the tests that draw random configurations: a grid too slow to run whole on every run draws a few of
its configurations per run, from a seed that changes every day (so over the days the grid is covered) and is
printed in the session's header and summary, so a failure can be repeated with GML_TEST_SEED=<seed>."""

from __future__ import annotations

import datetime as _dt
import os

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


@pytest.fixture(scope="session")
def grid_seed() -> int:
    value = os.environ[SEED_ENV]
    try:
        return int(value)
    except ValueError:
        raise pytest.UsageError(f"{SEED_ENV}: got {value!r}; allowed: an integer") from None
