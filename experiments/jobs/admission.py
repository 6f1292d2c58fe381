"""What the class queue takes, and what it keeps: a job's identity (two equal submissions are one run), its
parameters checked at submit, the GPUs it holds, and which results may be served to the next learner."""

from __future__ import annotations

import json
import pickle

from ..core.config import ConfigError


def job_key(kind: str, params: dict) -> str:
    """Two submissions are the same job when kind and every parameter are equal: they share one run."""
    return kind + ":" + json.dumps(params, sort_keys=True, default=str)


def cacheable(result) -> bool:
    """Only an experiment's own outcome is served to the next learner: never a cancelled run, nor one whose ranks
    failed (a killed rank, a collective that timed out), which the next run may well not repeat."""
    return isinstance(result, dict) and not result.get("cancelled") and not result.get("errors")


def check_params(params: dict) -> None:
    """A job's parameters cross a process boundary: one that cannot be pickled is refused here, at submit, naming
    it (in the worker's queue it would fail in a feeder thread and the job would never start)."""
    if not isinstance(params, dict):
        raise ConfigError(
            "params",
            f"got {type(params).__name__}; a job's parameters are a dict",
            "choice",
            value=type(params).__name__,
            allowed="dict",
        )
    for name, value in params.items():
        try:
            pickle.dumps(value)
        except Exception as e:  # noqa: BLE001 - pickling raises many types (TypeError, PicklingError, AttributeError)
            raise ConfigError(
                str(name),
                f"got a {type(value).__name__}, which cannot be sent to the worker ({type(e).__name__}); "
                "allowed: plain values (numbers, strings, lists, dicts)",
                "choice",
                value=type(value).__name__,
                allowed="numbers, strings, lists, dicts",
            ) from None


def devices_needed(kind: str, params: dict) -> int:
    """A multi-GPU job holds every GPU its ranks use; every other job holds one."""
    if kind != "distributed" or str(params.get("device", "auto")) == "cpu":
        return 1
    try:
        return max(1, int(params.get("world_size", 2)))  # DistributedConfig's default
    except (TypeError, ValueError):
        return 1
