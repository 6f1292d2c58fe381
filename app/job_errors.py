"""Why a job failed or was refused, as data: the error class the engine names, the rule (code) and its values.

The engine puts {"type", "code", "params"} beside a failed job's message (status["error_info"]); from an engine that
does not, the same is read off the message, "<class>: <text>" as the worker words it. The pages decide by the type
and code, never by matching text.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Failure:
    """Why a job failed or was refused, as the engine says it: its error class, the rule (code) and the values."""

    type: str
    message: str
    code: str | None = None
    params: dict = field(default_factory=dict)


def classify(info: dict | None, message: str, per_session: bool = False) -> Failure:
    """A failure from the engine's error_info; from an engine without it, from its message and exception."""
    if info and info.get("type"):
        return Failure(info["type"], message, info.get("code"), dict(info.get("params") or {}))
    # A status without error_info (an engine before structured errors): "<class>: <text>", as worded at the source.
    kind = message.split(":", 1)[0].strip() if ":" in message else "Internal"
    code = None
    if kind == "WouldNotFit" and "max_peak_gib" in message:
        code = "max_peak_gib"
    elif kind == "QueueFull":
        code = "per_session" if per_session else "queue"
    return Failure(kind, message, code)


def failure(status: dict) -> Failure | None:
    """A finished job's failure (None when it did not fail), from its error_info, else from its message."""
    if status.get("state") != "error":
        return None
    message = status.get("error") or "?"
    return classify(status.get("error_info"), message)
