"""The JSON a command-line run of a model of one's own writes (`python -m experiments estimate|fits|run ... --json`),
read as data for the "Your model" page: a model given by an import path runs only on the learner's own machine, and
its result is what the page may open. Nothing in the file is executed or imported; what the page shows is checked
here first (kinds, types, sizes), and anything else is refused with one line naming the field."""

from __future__ import annotations

import json

from experiments.core.config import CHOICES
from experiments.core.vocabulary import CATEGORIES, PHASES

MAX_BYTES = 4 * 2**20
KINDS = ("estimate", "cannot_predict", "fits", "run")
_PHASE_KEYS = ("phase", "step", "allocated_bytes", "peak_bytes")


class NotAResult(ValueError):
    """What is wrong with the file, in one line naming the field."""


def _need(data: dict, key: str, kind: type | tuple, where: str = ""):
    value = data.get(key)
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        value = None
    if not isinstance(value, kind):
        name = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise NotAResult(f"{where}{key}: expected {name}, got {type(value).__name__ if key in data else 'nothing'}")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
        raise NotAResult(f"{where}{key}: expected a number >= 0, got {value}")
    return value


def _bytes_map(value: dict, where: str) -> dict[str, int]:
    for k in value:
        if k not in CATEGORIES:
            raise NotAResult(f"{where}: {str(k)[:40]!r} is not a category; allowed: {', '.join(CATEGORIES)}")
        _need(value, k, int, f"{where}.")
    return value


def _one_of(data: dict, key: str, allowed: tuple, where: str) -> str:
    value = _need(data, key, str, where)
    if value not in allowed:
        raise NotAResult(f"{where}{key}: got {value[:40]!r}; allowed: {', '.join(allowed)}")
    return value


def _estimate(data: dict) -> dict:
    _need(data, "peak_bytes", int)
    phases = _need(data, "phases", list)
    for i, row in enumerate(phases):
        if not isinstance(row, dict):
            raise NotAResult(f"phases[{i}]: expected an object")
        _one_of(row, "phase", PHASES, f"phases[{i}].")
        for k in _PHASE_KEYS[1:]:
            _need(row, k, int, f"phases[{i}].")
    _bytes_map(_need(data, "categories", dict), "categories")
    _one_of(data, "peak_phase", PHASES, "")
    return data


def _fits(data: dict) -> dict:
    for k in ("batch", "capacity_bytes"):
        _need(data, k, int)
    for i, row in enumerate(_need(data, "grid", list)):
        if not isinstance(row, dict):
            raise NotAResult(f"grid[{i}]: expected an object")
        _choices(row, f"grid[{i}].")
        _need(row, "largest_batch", int, f"grid[{i}].")
        _need(row, "peak_bytes", (int, type(None)), f"grid[{i}].")
    cheapest = data.get("cheapest")
    if cheapest is not None:
        if not isinstance(cheapest, dict):
            raise NotAResult("cheapest: expected an object or null")
        _choices(cheapest, "cheapest.")
        for k in ("accum", "peak_bytes"):
            _need(cheapest, k, int, "cheapest.")
    if "measured" in data:
        _measured(_need(data, "measured", dict))
    return data


def _measured(m: dict) -> None:
    """`fits --measure`'s trials: per allocator the estimate, the largest batch that ran, and every trial."""
    _need(m, "device", str, "measured.")
    _need(m, "emulated", bool, "measured.")
    for key in ("default", "expandable"):
        if key not in m:
            continue
        where = f"measured.{key}."
        r = _need(m, key, dict, "measured.")
        _need(r, "estimate", int, where)
        _need(r, "largest_batch", (int, type(None)), where)
        for i, trial in enumerate(_need(r, "trials", list, where)):
            if not isinstance(trial, dict):
                raise NotAResult(f"{where}trials[{i}]: expected an object")
            _need(trial, "batch", int, f"{where}trials[{i}].")
            _need(trial, "ran", (bool, type(None)), f"{where}trials[{i}].")


def _choices(row: dict, where: str) -> None:
    for k in ("precision", "optimizer_impl", "checkpoint"):
        _one_of(row, k, CHOICES[k], where)


def _run(data: dict) -> dict:
    for k in ("peak_bytes", "baseline_bytes"):
        _need(data, k, int)
    _bytes_map(_need(data, "breakdown", dict), "breakdown")
    est = _need(data, "estimate", dict)
    _need(est, "peak_bytes", int, "estimate.")
    _bytes_map(_need(est, "categories", dict, "estimate."), "estimate.categories")
    _one_of(_need(data, "device", dict), "type", ("cuda", "cpu"), "device.")
    return data


def read(raw: bytes) -> tuple[str, dict]:
    """(kind, data): kind one of KINDS. Raises NotAResult."""
    if len(raw) > MAX_BYTES:
        raise NotAResult(f"file: {len(raw)} bytes; at most {MAX_BYTES} (a result is a few kB)")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise NotAResult(f"file: not JSON ({str(e)[:80]})") from None
    if not isinstance(data, dict):
        raise NotAResult("file: expected a JSON object, as `--json` writes")
    if data.get("predicted") is False:
        info = _need(data, "cannot_predict", dict)
        _need(info, "message", str, "cannot_predict.")
        return "cannot_predict", data
    if "grid" in data:
        return "fits", _fits(data)
    if "breakdown" in data:
        return "run", _run(data)
    if "phases" in data:
        return "estimate", _estimate(data)
    raise NotAResult("file: not the JSON of `estimate`, `fits` or `run` (none of phases, grid, breakdown)")


def describe(data: dict) -> str:
    """The model and levers the result is of, as text (shown verbatim, never as markup)."""
    cfg = data.get("config") if isinstance(data.get("config"), dict) else {}
    parts = [str(cfg.get(k))[:120] for k in ("model_source", "precision", "optimizer_impl", "checkpoint") if cfg.get(k)]
    return " · ".join(parts)
