"""The slow tests' turns (tests/slow_tests.py, tests/conftest.py): every slow test runs on one day of the turns, and
each day's share takes about the same time."""

from __future__ import annotations

import random

from tests import slow_tests
from tests.conftest import _slow_tests, _turn

LOG = """
============================= slowest durations ==============================
137.80s call     tests/engine/test_model_fits.py::test_cli
12.50s setup    tests/e2e/test_browser.py::test_the_projector_check_finds_each_fault[a long selectbox value]
1.00s call     tests/e2e/test_browser.py::test_the_projector_check_finds_each_fault[a long selectbox value]
0.40s teardown tests/app/test_pages.py::test_page_opens[home-en]
"""


def test_a_tests_setup_call_and_teardown_add_up_and_a_name_with_spaces_is_kept():
    got = slow_tests.durations(LOG)
    assert got == {
        "tests/engine/test_model_fits.py::test_cli": 137.8,
        "tests/e2e/test_browser.py::test_the_projector_check_finds_each_fault[a long selectbox value]": 13.5,
        "tests/app/test_pages.py::test_page_opens[home-en]": 0.4,
    }


def test_each_share_is_within_the_longest_test_of_the_mean():
    rng = random.Random(7)
    seconds = {f"t{i}": rng.uniform(2, 40) for i in range(150)}
    turn_of = slow_tests.deal(seconds, 6)
    assert set(turn_of) == set(seconds) and set(turn_of.values()) == set(range(6))
    load = [sum(s for t, s in seconds.items() if turn_of[t] == i) for i in range(6)]
    # Longest first, each to the lightest share: no share exceeds another by more than the longest test.
    assert max(load) - min(load) <= max(seconds.values())


def test_the_shipped_turns_cover_every_day_and_are_balanced():
    turns, count = _slow_tests()
    assert count == slow_tests.TURNS and set(turns.values()) == set(range(count))
    rows = [line.rsplit("\t", 2) for line in slow_tests.OUT.read_text(encoding="utf-8").splitlines()[1:]]
    load = [sum(float(s) for _, s, turn in rows if int(turn) == i) for i in range(count)]
    assert max(load) - min(load) <= max(float(s) for _, s, _ in rows)


SLOW_FIXTURE_LOG = """
65.85s setup    tests/engine/test_distributed.py::test_hand_counted_state_after_the_step
1.20s call     tests/engine/test_distributed.py::test_hand_counted_state_after_the_step
0.30s call     tests/engine/test_distributed.py::test_categories
4.00s setup    tests/e2e/test_browser.py::test_projector[zh]
92.00s call     tests/e2e/test_browser.py::test_projector[zh]
90.00s call     tests/e2e/test_browser.py::test_projector[en]
0.50s call     tests/e2e/test_browser.py::test_check_finds_a_fault
3.00s call     tests/app/test_pages.py::test_page_opens[home-en]
0.40s call     tests/app/test_pages.py::test_page_opens[home-zh]
"""


def test_a_file_whose_fixture_costs_more_than_its_tests_is_dealt_whole_and_its_fast_tests_follow_it():
    units = slow_tests.units(SLOW_FIXTURE_LOG)
    # The gloo fixture's file as one row (its 0.3 s test would otherwise pay 66 s every day); the browser file's
    # server (4 s) costs less than either page walk, so its walks are dealt apart and its fast check runs daily.
    assert units == {
        "tests/engine/test_distributed.py": 67.35,
        "tests/e2e/test_browser.py::test_projector[zh]": 96.0,
        "tests/e2e/test_browser.py::test_projector[en]": 90.0,
        "tests/app/test_pages.py::test_page_opens[home-en]": 3.0,
    }
    turns = {"tests/engine/test_distributed.py": 4, "tests/app/test_pages.py::test_page_opens[home-en]": 1}
    assert _turn("tests/engine/test_distributed.py::test_categories", turns, today=0) == 4
    assert _turn("tests/app/test_pages.py::test_page_opens[home-en]", turns, today=0) == 1
    assert _turn("tests/app/test_pages.py::test_page_opens[home-zh]", turns, today=0) == 0
