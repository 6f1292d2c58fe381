"""What the graded exercises share, without Streamlit: reading an exercise's settings from its meta.json
("grading"), the tolerance rule, a grade's sentences and the learner's progress.

A grade is plain data (dicts with message keys and arguments): the pages word it in the learner's language,
the tests check it without running a page.
"""

from __future__ import annotations


class SettingsError(ValueError):
    """An exercise's "grading" settings break a rule; the message names the field and what is allowed."""


def section(meta: dict) -> dict:
    grading = meta.get("grading")
    if not isinstance(grading, dict):
        raise SettingsError(f'{meta.get("id", "?")}/meta.json: no "grading" settings')
    return grading


def number(grading: dict, name: str, lo: float, hi: float, meta: dict, integer: bool = False) -> float:
    """A setting that must be a number in [lo, hi] (an int where `integer`)."""
    value = grading.get(name)
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not lo <= value <= hi:
        raise SettingsError(
            f"{meta.get('id', '?')}/meta.json grading.{name}: got {value!r}; allowed range is "
            f"[{lo}, {hi}]" + (" (an integer)" if integer else "")
        )
    return value


def names(grading: dict, name: str, allowed, meta: dict) -> tuple:
    """A setting that must be a non-empty list of distinct names of `allowed`."""
    value = grading.get(name)
    if (
        not isinstance(value, list)
        or not value
        or len(set(map(str, value))) != len(value)
        or any(v not in allowed for v in value)
    ):
        raise SettingsError(
            f"{meta.get('id', '?')}/meta.json grading.{name}: got {value!r}; allowed: a list of "
            f"distinct names of {', '.join(map(str, allowed))}"
        )
    return tuple(value)


def tolerance_bytes(measured: float, tolerance: float, floor_bytes: float) -> float:
    return max(tolerance * abs(measured), floor_bytes)


def within(predicted: float, measured: float, tolerance: float, floor_bytes: float) -> bool:
    # One byte of slack: predictions are typed in MiB, and 1.1 x a value is not exact in binary floating point.
    return abs(predicted - measured) <= tolerance_bytes(measured, tolerance, floor_bytes) + 1


def message(key: str, fallback: str | None = None, **args) -> dict:
    """One sentence of a grade: an i18n key, the key to say instead where the first has no wording, and its
    (already computed) arguments."""
    out = {"key": key, "args": args}
    if fallback:
        out["fallback"] = fallback
    return out


def progress_key(lesson_id: str) -> str:
    # Also the URL query parameter: a learner who comes back with the link sees where they were.
    return f"{lesson_id}_progress"


def parse_progress(raw, total: int) -> int:
    """A progress value from a link: how many of the exercise's `total` checks the learner's best attempt passed."""
    value = int(raw)
    if not 0 <= value <= total:
        raise ValueError(raw)
    return value
