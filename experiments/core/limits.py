"""Operator limits for a shared server, in one JSON file (docs/operators.md). Torch-free.

    GPU_MEMORY_LAB_LIMITS=/etc/gpu-memory-lab.json streamlit run app/main.py
Keys (all optional): max_job_seconds, max_queue, max_queue_per_session, max_peak_gib, estimate_processes. A learner cannot lift them, not even with
"Run even if the estimate says it won't fit" or a shared link that switches it on.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, fields

ENV = "GPU_MEMORY_LAB_LIMITS"
JOB_SECONDS_ENV = "GPU_MEMORY_LAB_MAX_JOB_SECONDS"  # without a limits file: max_job_seconds alone
WHOLE = ("max_queue", "max_queue_per_session", "estimate_processes")  # counts


@dataclass(frozen=True)
class Limits:
    max_job_seconds: float = 600.0  # a job still running then is stopped (its worker restarted)
    max_queue: int = 200  # jobs waiting at once, all learners together
    max_peak_gib: float | None = None  # refuse configurations estimated above this, even when forced
    max_queue_per_session: int = 8  # jobs one browser tab may have waiting (Compare strategies sends 7 at once)
    estimate_processes: int = 2  # estimates at once, each tab one at a time in a class (jobs/estimates.py)


class LimitsError(ValueError):
    pass


def load(path: str | None = None) -> Limits:
    path = path or os.environ.get(ENV)
    data: dict = {}
    where = f"{ENV}={path}"
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise LimitsError(f"{where}: cannot read the limits file ({e})") from None
        if not isinstance(data, dict):
            raise LimitsError(f"{where}: the limits file holds {type(data).__name__}, not one JSON object of keys")
    elif os.environ.get(JOB_SECONDS_ENV):  # the older single setting
        raw = os.environ[JOB_SECONDS_ENV]
        where = f"{JOB_SECONDS_ENV}={raw}"
        try:
            data = {"max_job_seconds": float(raw)}
        except ValueError:
            raise LimitsError(f"{where}: max_job_seconds must be a positive number of seconds") from None
    known = {f.name for f in fields(Limits)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise LimitsError(f"{where}: unknown key {unknown[0]!r}; known keys: {', '.join(sorted(known))}")
    for key, value in data.items():
        whole = key in WHOLE
        if value is None and key == "max_peak_gib":
            continue
        if isinstance(value, bool) or not isinstance(value, int if whole else (int, float)) or not 0 < value < math.inf:
            kind = "a positive whole number" if whole else "a positive number"
            raise LimitsError(f"{where}: {key} must be {kind}, got {value!r}")
    return Limits(**data)


_CHECKED: list[str | None] = []


def problem() -> str | None:
    """The limits file's error, read once per process (a server checks it as it serves its first page), or None."""
    if not _CHECKED:
        try:
            load()
            _CHECKED.append(None)
        except LimitsError as e:
            _CHECKED.append(str(e))
    return _CHECKED[0]
