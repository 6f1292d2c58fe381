"""Every lesson text renders its emphasis: a "**" that CommonMark cannot close or open stays on the page as two
asterisks. It happens in Chinese beside full-width punctuation ("**AMP（bf16）**省下了": a closing "**" after "）"
and before a Han character is not right-flanking), which Streamlit's Markdown renders as the reader saw it."""

from __future__ import annotations

import re

import pytest

from tests.lessons.test_language_parity import PAIRS

markdown_it = pytest.importorskip("markdown_it")
RENDER = markdown_it.MarkdownIt("commonmark").render
CODE = re.compile(r"<code>.*?</code>|<pre>.*?</pre>", re.S)


def _texts():
    """Every lesson text in each language (the pairs the language-parity test reads: Markdown files and {en, zh})."""
    for where, en, zh in PAIRS:
        yield f"{where}[en]", en
        yield f"{where}[zh]", zh


def _left_marks(text: str) -> list[str]:
    html = CODE.sub("", RENDER(text))
    # "x ** 2" in prose is Python's power, not emphasis
    return [html[max(0, m.start() - 30) : m.end() + 20] for m in re.finditer(r"\*\*(?! \d)", html)]


def test_no_lesson_text_shows_its_emphasis_marks():
    left = {where: marks for where, text in _texts() if (marks := _left_marks(text))}
    assert not left, left


def test_a_mark_beside_full_width_punctuation_is_found():
    assert _left_marks("- **AMP（bf16）**省下了 13 MiB")
    assert not _left_marks("- **AMP（bf16）** 省下了 13 MiB")
    assert not _left_marks("loss = ((out - y) ** 2).mean()")
