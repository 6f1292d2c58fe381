"""Chinese ratio wording that cannot be misread: "慢 2 倍" may mean 2x or 3x the time, so every Chinese lesson text
and UI string states a ratio as "耗时是基线的 X 倍" (or another "是……的 X 倍" form) instead."""

from __future__ import annotations

import json
import re

import pytest

from app.i18n import STRINGS
from course import content

NUMBER = r"(?:\{\{?\s*[\w.]+\s*\}?\}|\d+(?:\.\d+)?|[一二两三四五六七八九十百几好]+)"
# A comparative directly followed by a multiple: "慢 3 倍", "快了 {{x}} 倍", "慢上好几倍", "缩小 {k} 倍".
AMBIGUOUS = re.compile(
    r"(?:缩小|减少|降低|增加|提高|增大|提升|加快|减慢|慢|快|小|大|多|少|低|高|短|长)(?:了|上|出)?\**\s*"
    + NUMBER
    + r"\s*倍"
)


def zh_strings(value) -> list[str]:
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in ([v] if k == "zh" and isinstance(v, str) else zh_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in zh_strings(v)]
    return []


def lesson_texts() -> list[tuple[str, str]]:
    out = []
    for folder in sorted(content.lessons_dir().iterdir()):
        for path in sorted(folder.glob("*.zh.md")):
            out.append((f"{folder.name}/{path.name}", path.read_text(encoding="utf-8")))
        meta = folder / "meta.json"
        if meta.exists():
            out += [(f"{folder.name}/meta.json", s) for s in zh_strings(json.loads(meta.read_text(encoding="utf-8")))]
    return out


def test_the_pattern_catches_the_ambiguous_forms_only():
    for bad in (
        "单步慢了 {{accum_slowdown}} 倍",
        "**慢** {{x}} 倍",
        "比 fp32 快了 4.8 倍",
        "会让每一步都慢上好几倍",
        "都缩小 {k} 倍",
        "快 2 倍",
    ):
        assert AMBIGUOUS.search(bad), bad
    for good in (
        "耗时是基线的 {{amp_slowdown}} 倍",
        "单步耗时约是原来的 3.5 倍",
        "是 DDP 的一倍半",
        "参数的两倍",
        "把 batch 提高到八倍",
        "batch 翻倍",
        "耗时成倍增加",
        "缩小到 1/{k}",
        "大小的 {error} 倍",
    ):
        assert not AMBIGUOUS.search(good), good


@pytest.mark.parametrize(("where", "text"), lesson_texts(), ids=lambda v: v if len(v) < 40 else None)
def test_chinese_lessons_state_ratios_unambiguously(where, text):
    assert not AMBIGUOUS.findall(text), f"{where}: {AMBIGUOUS.findall(text)}; write “耗时是基线的 X 倍”"


def test_chinese_ui_strings_state_ratios_unambiguously():
    found = {key: AMBIGUOUS.findall(zh) for key, (_, zh) in STRINGS.items() if AMBIGUOUS.search(zh)}
    assert not found, f"{found}; write “耗时是基线的 X 倍”"
