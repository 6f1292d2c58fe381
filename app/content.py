"""Reads lesson texts and settings from lessons/<id>/ at runtime (no Streamlit here)."""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LESSON_IDS = (
    "home",
    "monitoring",
    "analysis",
    "optimization",
    "leaks",
    "compare",
    "exercise1",
    "exercise2",
    "exercise3",
)


def lessons_dir() -> Path:
    # The override lets tests and development point at other lesson files without touching lessons/.
    return Path(os.environ.get("GPU_MEMORY_LAB_LESSONS", ROOT / "lessons"))


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


@lru_cache(maxsize=256)
def _read(path: Path, mtime: float | None) -> str | None:
    # mtime is part of the cache key so edited lesson files show up without a restart.
    if mtime is None:
        return None
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def read_text(lesson_id: str, name: str, lang: str) -> tuple[str | None, str | None]:
    """(text, language it is in) of lessons/<id>/<name>.<lang>.md, else the other language's file."""
    for candidate in (lang, "en" if lang == "zh" else "zh"):
        path = lessons_dir() / lesson_id / f"{name}.{candidate}.md"
        text = _read(path, _mtime(path))
        if text is not None:
            return text, candidate
    return None, None


def meta(lesson_id: str) -> dict:
    path = lessons_dir() / lesson_id / "meta.json"
    text = _read(path, _mtime(path))
    if not text:
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}


def localized(value, lang: str, default: str = "") -> str:
    """A {"en": ..., "zh": ...} dict (or a plain string) in the wanted language."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        for key in (lang, "en", "zh"):
            if isinstance(value.get(key), str) and value[key]:
                return value[key]
    return default
