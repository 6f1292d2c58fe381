"""Results recorded on a real GPU by this project's own CLI, shipped so learners without a GPU see them.

Each file in recorded/<gpu>/ is {"id", "lesson", "label": {"en","zh"}, "kind", "result"}, written by
benchmarks/record_results.py; the result has the same schema as a live run.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

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
        out.append({"id": entry["id"], "lesson": entry.get("lesson"), "label": entry.get("label"),
                    "kind": entry.get("kind", "run"), "config": result.get("config"), "device": result.get("device"),
                    "recorded_at": result.get("started_at")})
    return out


def load_recorded(entry_id: str) -> dict | None:
    entry = _index().get(entry_id)
    return None if entry is None else entry["result"]


def find_recorded(config: dict) -> dict | None:
    """A recorded run whose configuration equals `config` (ignoring device and timing fields)."""
    ignore = {"device", "force", "timing_steps", "steps"}
    want = {k: v for k, v in config.items() if k not in ignore}
    for entry in _index().values():
        cfg = entry["result"].get("config") or {}
        if entry.get("kind", "run") == "run" and {k: v for k, v in cfg.items() if k not in ignore} == want:
            return entry["result"]
    return None
