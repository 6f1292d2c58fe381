"""Results recorded on a real GPU by this project's own CLI, shipped so learners without a GPU see them.

Each file in recorded/<gpu>/ is {"id", "lesson", "label": {"en","zh"}, "kind", "result"}, written by
benchmarks/record_results.py; the result has the same schema as a live run.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from . import finetune

ROOT = Path(__file__).resolve().parents[2] / "recorded"


@lru_cache(maxsize=1)
def _index() -> dict[str, dict]:
    entries = {}
    for path in sorted(ROOT.glob("*/*.json")):
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        entries[entry["id"]] = entry
    return entries


def list_recorded(lesson: str | None = None) -> list[dict]:
    out = []
    for entry in _index().values():
        if lesson and entry.get("lesson") != lesson:
            continue
        result = entry["result"]
        out.append(
            {
                "id": entry["id"],
                "lesson": entry.get("lesson"),
                "label": entry.get("label"),
                "kind": entry.get("kind", "run"),
                "config": result.get("config"),
                "device": result.get("device"),
                "recorded_at": result.get("started_at"),
            }
        )
    return out


def load_recorded(entry_id: str) -> dict | None:
    entry = _index().get(entry_id)
    return None if entry is None else entry["result"]


# A recorded run is "the same experiment" as a configuration when every field but these is equal: where it ran, the
# learner's "run even if it won't fit", how long it was timed and how many steps it measured (from step 2 on, every
# step is the steady state) change no figure a lesson reads off it.
NOT_THE_EXPERIMENT = ("device", "force", "timing_steps", "steps")


# Fields added after results were recorded, at the value every earlier run had: a recording without the field is of
# the same experiment as a configuration with it at this value.
ADDED_LATER = {"model_source": "", "model_overrides": "", **finetune.DEFAULTS}


def torch_release(version: str | None) -> str | None:
    """ "2.11" of "2.11.0+cu130": the release whose code a recording ran (its sharding, its kernels' choices)."""
    if not version:
        return None
    parts = version.split("+")[0].split(".")
    return ".".join(parts[:2]) if len(parts) >= 2 else None


def recorded_torch(result: dict) -> str | None:
    """The torch version a recorded result was measured with (its device block), or None for an older file."""
    return ((result or {}).get("device") or {}).get("torch_version")


def experiment_key(config: dict) -> tuple:
    """What makes two configurations (plain dicts, as results record them) the same experiment: equal keys are."""
    return tuple(
        sorted(
            (k, v)
            for k, v in config.items()
            if k not in NOT_THE_EXPERIMENT and not (k in ADDED_LATER and v == ADDED_LATER[k])
        )
    )


def find_recorded(config: dict) -> dict | None:
    """A recorded run of the same experiment as `config` (experiment_key)."""
    want = experiment_key(config)
    for entry in _index().values():
        if entry.get("kind", "run") == "run" and experiment_key(entry["result"].get("config") or {}) == want:
            return entry["result"]
    return None
