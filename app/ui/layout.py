"""Page scaffolding shared by all views: title, lesson column, charts with their prompts."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import streamlit as st

from app.i18n import lang, t
from app.ui import expect_view
from course import content, facts

# Shipped, not a material icon or an emoji: Streamlit fetches those favicons from a font CDN, which fails offline.
FAVICON = Path(__file__).resolve().parents[1] / "static" / "favicon.png"


@contextlib.contextmanager
def lazy_expander(label: str, *, key: str, expanded: bool = False, icon: str | None = None) -> Iterator[bool]:
    """An expander whose body is computed only while it is open; yields whether it is. Streamlit runs a closed
    expander's body on every page run: a recording's charts there cost about a second of server time per run."""
    with st.expander(label, expanded=expanded, icon=icon, key=key, on_change="rerun") as box:
        yield bool(box.open)


def lesson_meta(lesson_id: str) -> dict:
    return content.meta(lesson_id)


def header(lesson_id: str, meta: dict) -> None:
    # The sidebar's name of the page, so a class told "open Exercise 2 · Make it fit" finds that title on top.
    st.title(t("page." + lesson_id))
    summary = expect_view.text(meta, meta.get("summary"))
    if summary:
        st.caption(summary)


def columns():
    """Lesson left, sandbox right; Streamlit stacks them on narrow screens."""
    return st.columns(2, gap="large")


def lesson_page(lesson_id: str):
    """Title, then the lesson text in the left column. Returns (meta, left, right) for the page to fill."""
    meta = lesson_meta(lesson_id)
    header(lesson_id, meta)
    left, right = columns()
    with left:
        markdown_file(lesson_id)
    return meta, left, right


def markdown_file(lesson_id: str, name: str = "lesson") -> bool:
    text, used = content.read_text(lesson_id, name, lang())
    if text is None:
        st.info(t("lesson.missing"))
        return False
    if used != lang():
        st.caption(t("lesson.fallback"))
    st.markdown(facts.render(text, expect_view.page_facts(lesson_meta(lesson_id))))
    return True


def prompts(meta: dict, kind: str, runs: dict | None = None, **where) -> None:
    """'What to notice' (checked against `runs`) and 'Try this' under a chart; see app/ui/expect_view.py."""
    expect_view.render(meta, kind, runs, **where)


# tests/app/conftest.py turns it on: every chart a test draws is checked against Vega-Lite's schema.
VALIDATE = False


def altair(figure) -> None:
    """st.altair_chart(figure), without Altair's check of the whole spec against Vega-Lite's JSON schema on every
    page run: about 30 ms a chart on 2 cores, a third of a lesson's script run after Run. The charts are this app's
    own code, and the tests draw each of them with the check on."""
    if not VALIDATE and "to_dict" not in vars(figure):  # once per object, however often it is drawn
        to_dict = figure.to_dict
        # object.__setattr__: an Altair object's own __setattr__ would make it a property of the spec.
        object.__setattr__(figure, "to_dict", lambda *a, **k: to_dict(*a, **{**k, "validate": False}))
    st.altair_chart(figure, width="stretch")


def chart(figure, meta: dict, kind: str, runs: dict | None = None, **where) -> None:
    altair(figure)
    prompts(meta, kind, runs, **where)


def section(part, meta: dict, runs: dict | None = None, **where) -> None:
    """A chart's section (app/charts/common.py `Section`): heading, caption, chart, text, prompts."""
    st.markdown(f"##### {part.title}")
    if part.caption:
        st.caption(part.caption)
    if part.figure is not None:
        altair(part.figure)
    if part.text:
        st.markdown(part.text)
    if part.prompts:
        prompts(meta, part.prompts, runs, **where)
