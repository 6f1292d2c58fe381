"""Every visible UI string of the app in English and Chinese, as data: what every page shares (the chrome) in
app/i18n/strings.json, and the sentences only one lesson's page shows in lessons/<id>/strings.json. Each file maps
a key to {"en": ..., "zh": ...}. Lesson prose lives in lessons/ as Markdown, not here.

The lesson files are read from the project's own lessons/ folder, not from GPU_MEMORY_LAB_LESSONS: they are the
page's interface, which is the same whichever lesson texts a test or an author points the app at."""

from __future__ import annotations

import json
from pathlib import Path

import streamlit as st

from course import catalog

LANGS = ("zh", "en")
CHROME = Path(__file__).with_name("strings.json")
LESSONS = Path(__file__).resolve().parents[2] / "lessons"


def files() -> list[Path]:
    """The string files: the chrome, then each page's own (in course order), where it has one."""
    return [CHROME] + [p for p in (LESSONS / page / "strings.json" for page in catalog.PAGE_IDS) if p.exists()]


def entries(path: Path) -> list[tuple[str, dict]]:
    """(key, {"en", "zh"}) in the order the file states them, a key stated twice included."""
    return json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=list)


def _load() -> dict[str, tuple[str, str]]:
    strings: dict[str, tuple[str, str]] = {}
    for path in files():
        for key, entry in entries(path):
            entry = dict(entry)
            en, zh = entry.get("en") or entry.get("zh") or key, entry.get("zh") or entry.get("en") or key
            strings.setdefault(key, (en, zh))  # the first file to define a key wins; the tests refuse a second
    return strings


# key: (en, zh)
STRINGS: dict[str, tuple[str, str]] = _load()


def lang() -> str:
    try:
        value = st.session_state.get("lang")
    except Exception:  # noqa: BLE001 - outside a Streamlit run (e.g. plain unit tests)
        value = None
    return value if value in LANGS else "en"


def t(key: str, default: str | None = None, **fmt) -> str:
    pair = STRINGS.get(key)
    if pair is None:
        text = key if default is None else default
    else:
        text = pair[1] if lang() == "zh" else pair[0]
    return text.format(**fmt) if fmt else text
