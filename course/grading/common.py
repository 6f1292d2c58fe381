"""What the graded exercises share, without Streamlit: the tolerance rule and a grade's progress.

A grade is plain data (dicts with message keys and arguments): the pages word it in the learner's
language, the tests check it without running a page.
"""

from __future__ import annotations

MIB = 2**20

# A prediction counts when it is within 10 % of the measured value. Small categories get an absolute
# floor instead: half a MiB, so that "none" and a few KiB both count as nothing, and a prediction is
# never failed over rounding in the last digit the form shows.
TOLERANCE = 0.10
FLOOR_BYTES = MIB // 2


def tolerance_bytes(measured: float) -> float:
    return max(TOLERANCE * abs(measured), FLOOR_BYTES)


def within(predicted: float, measured: float) -> bool:
    # One byte of slack: predictions are typed in MiB, and 1.1 x a value is not exact in binary floating point.
    return abs(predicted - measured) <= tolerance_bytes(measured) + 1


def message(key: str, **args) -> dict:
    """One sentence of a grade: an i18n key and its (already computed) arguments."""
    return {"key": key, "args": args}


# Progress per exercise: how many of its checks the learner's best attempt passed.
PROGRESS_TOTAL = {"exercise1": 5, "exercise2": 3, "exercise3": 2}


def progress_key(lesson_id: str) -> str:
    # Also the URL query parameter: a learner who comes back with the link sees where they were.
    return f"{lesson_id}_progress"


def parse_progress(lesson_id: str, raw) -> int:
    value = int(raw)
    if not 0 <= value <= PROGRESS_TOTAL[lesson_id]:
        raise ValueError(raw)
    return value
