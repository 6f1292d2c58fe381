"""What went wrong with a job, as data: every failed (or cancelled) job's status keeps `error` (the message, as it
always read) and carries `error_info = {"type", "code", "params"}`, built here and nowhere else, so a page words it
from its type and code instead of matching the message's text.

    WouldNotFit   the estimate says it will not fit; code "capacity" | "host_memory" | "paged_memory" | "pinned_memory"
                  | "max_peak_gib"
    QueueFull     refused at submit; code "full" | "per_session"
    ConfigError   a value the engine refuses; its code (experiments/core/config.py ERROR_CODES), params with "field"
    OutOfMemory   the device ran out of memory outside a run that reports it as a result
    Cancelled     cancelled; code "abandoned" when every page that asked for it was closed
    WorkerDied    the worker process died while it ran the job (it was restarted)
    Timeout       stopped after the server's max_job_seconds; params {"seconds"}
    Internal      anything else; params {"class"}: the exception's class
"""

from __future__ import annotations

import sys

from ..core.config import ConfigError
from ..core.errors import Cancelled, WouldNotFit

TYPES = ("WouldNotFit", "QueueFull", "ConfigError", "OutOfMemory", "Cancelled", "WorkerDied", "Timeout", "Internal")


class QueueFull(RuntimeError):
    def __init__(self, message: str, per_session: bool = False, limit: int | None = None):
        super().__init__(message)
        self.per_session = per_session
        self.limit = limit


def info(kind: str, code: str | None = None, **params) -> dict:
    if kind not in TYPES:
        raise ValueError(f"error type: got {kind!r}; allowed: {', '.join(TYPES)}")
    return {"type": kind, "code": code, "params": {k: _plain(v) for k, v in params.items()}}


def _plain(value):
    """A parameter as JSON has it (a job's status crosses a process boundary and reaches a page)."""
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


def message(exc: BaseException) -> str:
    """A failed job's `error`: the exception's class and its message, as the status always read."""
    return f"{type(exc).__name__}: {exc}"


def describe(exc: BaseException) -> dict:
    """The `error_info` of the exception a job raised."""
    if isinstance(exc, WouldNotFit):
        return info("WouldNotFit", exc.code, **exc.params)
    if isinstance(exc, QueueFull):
        return info("QueueFull", "per_session" if exc.per_session else "full", limit=exc.limit)
    if isinstance(exc, ConfigError):
        return info("ConfigError", exc.code, field=exc.field, **exc.params)
    torch = sys.modules.get("torch")  # the web process never imports it: there, no error is torch's
    if torch is not None and isinstance(exc, torch.OutOfMemoryError):
        return info("OutOfMemory")
    if isinstance(exc, Cancelled):
        return info("Cancelled")
    return info("Internal", **{"class": type(exc).__name__})


def cancelled(abandoned: bool = False) -> dict:
    return info("Cancelled", "abandoned" if abandoned else None)


def worker_died() -> dict:
    return info("WorkerDied")


def timeout(seconds: float) -> dict:
    return info("Timeout", seconds=seconds)


def unknown_job() -> dict:
    return info("Internal", "unknown_job")
