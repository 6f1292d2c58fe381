"""What a picker, a chart row or a table's first column shows of a technique or strategy fits a projector's half-width
column at 1024 px: a title longer than that has a short name in both languages (the page writes the title in full
under the picker or beside the short name), and the short name fits."""

from __future__ import annotations

import unicodedata

import pytest

from course import catalog, content

# A selectbox in a half-width column at 1024 x 768 with the sidebar open shows about 240 px of 14 px text.
FITS_EM = 240 / 14
ITEMS = [
    (lesson, key, item["id"])
    for lesson in catalog.LESSON_IDS
    for key in ("techniques", "strategies")
    for item in content.meta(lesson).get(key) or []
]


def width_em(text: str) -> float:
    """The text's width in em of a proportional Latin font: a CJK or full-width character is one em, others about
    0.55 (Source Sans averages 0.5 for lower case; capitals and digits are wider)."""
    return sum(1.0 if unicodedata.east_asian_width(ch) in ("W", "F") else 0.55 for ch in text)


def test_width_em_counts_cjk_as_twice_latin():
    assert width_em("ab") == pytest.approx(1.1)
    assert width_em("梯度") == 2.0
    assert width_em("Gradient accumulation (4 micro-batches)") > FITS_EM  # cut in the picker at 1024 px


@pytest.mark.parametrize(("lesson", "key", "item_id"), ITEMS, ids=[f"{a}.{c}" for a, _, c in ITEMS])
def test_a_long_title_has_a_short_name_that_fits(lesson, key, item_id):
    item = next(x for x in content.meta(lesson)[key] if x["id"] == item_id)
    for lang in ("en", "zh"):
        title = content.localized(item.get("title"), lang, item_id)
        short = item.get("short")
        if width_em(title) > FITS_EM:
            assert isinstance(short, dict) and short.get(lang), f"{lesson}.{item_id}: {title!r} needs a short name"
        if short:
            name = content.localized(short, lang)
            assert isinstance(short, dict) and short.get(lang), f"{lesson}.{item_id}: a short name in {lang}"
            assert width_em(name) <= FITS_EM, f"{lesson}.{item_id}: the short name {name!r} is cut at 1024 px"
