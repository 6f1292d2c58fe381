"""Operator limits for a shared server, in one JSON file (docs/operators.md). Torch-free.

    GPU_MEMORY_LAB_LIMITS=/etc/gpu-memory-lab.json streamlit run app/main.py
Keys (all optional): max_job_seconds, max_queue, max_queue_per_session, max_peak_gib. A learner cannot lift them, not even with
"Run even if the estimate says it won't fit" or a shared link that switches it on.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, fields

ENV = "GPU_MEMORY_LAB_LIMITS"


@dataclass(frozen=True)
class Limits:
    max_job_seconds: float = 600.0  # a job still running then is stopped (its worker restarted)
    max_queue: int = 200  # jobs waiting at once, all learners together
    max_peak_gib: float | None = None  # refuse configurations estimated above this, even when forced
    max_queue_per_session: int = 8  # jobs one browser tab may have waiting (Compare strategies sends 7 at once)


class LimitsError(ValueError):
    pass


def load(path: str | None = None) -> Limits:
    path = path or os.environ.get(ENV)
    data: dict = {}
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise LimitsError(f"{ENV}={path}: cannot read the limits file ({e})") from None
    elif os.environ.get("GPU_MEMORY_LAB_MAX_JOB_SECONDS"):  # the older single setting
        data = {"max_job_seconds": float(os.environ["GPU_MEMORY_LAB_MAX_JOB_SECONDS"])}
    known = {f.name for f in fields(Limits)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise LimitsError(f"{path}: unknown key {unknown[0]!r}; known keys: {', '.join(sorted(known))}")
    for key, value in data.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
            raise LimitsError(f"{path}: {key} must be a positive number, got {value!r}")
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
