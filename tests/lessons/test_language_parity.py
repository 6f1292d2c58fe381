"""English and Chinese make the same claims: every lesson text quotes the same facts ({{name}}) and fills the same
fields ({name}) in both languages, Markdown files and {en, zh} texts alike. A zh-only edit that quotes another fact
(or drops one) fails here; a number typed in place of a fact fails in test_lesson_data's scan for bare figures."""

from __future__ import annotations

import json
import re

import pytest

from course import content

FIELD = re.compile(r"\{\{?\s*([A-Za-z0-9_.]+)[^{}]*\}\}?")


def pairs():
    for lesson in sorted(d for d in content.lessons_dir().iterdir() if d.is_dir()):
        for en in sorted(lesson.glob("*.en.md")):
            zh = en.with_name(en.name.replace(".en.md", ".zh.md"))
            yield str(en.relative_to(content.lessons_dir())), en.read_text("utf-8"), zh.read_text("utf-8")
        for path in sorted(lesson.glob("*.json")):
            yield from _texts(json.loads(path.read_text("utf-8")), str(path.relative_to(content.lessons_dir())))


def _texts(node, where):
    if isinstance(node, dict):
        if isinstance(node.get("en"), str) and isinstance(node.get("zh"), str):
            yield where, node["en"], node["zh"]
        for key, value in node.items():
            yield from _texts(value, f"{where}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _texts(value, f"{where}[{i}]")


PAIRS = list(pairs())


def unshared(en: str, zh: str) -> set[str]:
    """The facts and fields one language quotes and the other does not (a text may repeat one in one language)."""
    return set(FIELD.findall(en)) ^ set(FIELD.findall(zh))


def test_every_english_lesson_file_has_its_chinese_one():
    md = [p for p in content.lessons_dir().rglob("*.en.md")]
    assert md and all(p.with_name(p.name.replace(".en.md", ".zh.md")).exists() for p in md)
    assert len(PAIRS) > 300, len(PAIRS)


@pytest.mark.parametrize("where,en,zh", PAIRS, ids=[w for w, _, _ in PAIRS])
def test_both_languages_quote_the_same_facts(where, en, zh):
    assert not unshared(en, zh), (sorted(unshared(en, zh)), where)


def test_a_fact_swapped_in_one_language_is_caught():
    en = "AMP saves {{amp_saved_mib}} MiB; segments save {{segments_saved_mib}} MiB."
    zh = "AMP 省下 {{amp_saved_mib}} MiB；分段省下 {{amp_saved_mib}} MiB。"
    assert unshared(en, zh) == {"segments_saved_mib"}
    assert unshared("{n} of {total:,} rows", "{total:,} 行中的 {n} 行") == set()
