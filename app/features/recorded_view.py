"""Browser for results recorded on a real GPU and shipped with the app (for learners without one)."""

from __future__ import annotations

import streamlit as st

from app import backend
from app.features import data_parallel_result, fragmentation_view, leak_sandbox, rounds_view
from app.i18n import lang, t
from app.ui import expect_view, layout, results, widget_state
from app.ui.errors import engine_error
from course import catalog, content


def _label(entry: dict) -> str:
    return content.localized(entry.get("label"), lang(), entry.get("id", "?"))


# About what a picker in a half-width column shows whole at 1024 px: a longer label's details go under it.
PICKER_CHARS = 40


def short_names(lesson: str | None) -> dict[str, str]:
    """A lesson's technique and strategy titles -> their short names, in the page's language: a recording's label
    begins with the title it was recorded under."""
    meta = content.meta(lesson or catalog.HOME)
    items = [x for k in ("techniques", "strategies") for x in meta.get(k) or [] if isinstance(x, dict)]
    return {
        content.localized(x.get("title"), lang(), ""): content.localized(x.get("short"), lang(), "")
        for x in items
        if x.get("short")
    }


def _short(label: str, title: str | None, names: dict[str, str] | None = None) -> str:
    """The picker's name for a run: without its own lesson's title in front, a technique's or strategy's title as its
    short name (`names`), and, when still long, without the details after the run's name (after its first colon, or
    a closing parenthesis) that the caption beneath shows."""
    for sep in (": ", "："):
        if title and label.startswith(title + sep):
            label = label[len(title) + len(sep) :]
    for full, short in sorted((names or {}).items(), key=lambda kv: -len(kv[0])):
        if full and short and label.startswith(full):
            label = short + label[len(full) :]
            break
    if len(label) <= PICKER_CHARS:
        return label
    for sep in ("：", ": "):
        head, found, _ = label.partition(sep)
        if found and head.strip():
            return head
    if label.endswith(")") and " (" in label:
        return label[: label.rindex(" (")]
    return label


def _where(entry: dict) -> str:
    """Device and date, under the picker: in the label they would cut it in a half-width column on a projector."""
    device = entry.get("device") or {}
    return " · ".join(p for p in (device.get("name"), str(entry.get("recorded_at") or "")[:10]) if p)


# The home page's groups: a distributed run (ranks, a communication category) is drawn per rank, and a recording
# made on a CPU is not a GPU run.
GROUPS = (
    ("gpu", "recorded.title", "recorded.explain"),
    ("cpu", "recorded.title_cpu", "recorded.explain_cpu"),
    ("distributed", "recorded.title_distributed", "recorded.explain_distributed"),
)


def group(entry: dict) -> str:
    if entry.get("kind") == "distributed":
        return "distributed"
    return "gpu" if (entry.get("device") or {}).get("type") == "cuda" else "cpu"


def order(entry: dict) -> tuple[int, bool]:
    """In the course's order, each lesson's plain runs first: the home page opens on lesson 1's preset."""
    lesson = entry.get("lesson")
    return (catalog.PAGE_IDS.index(lesson) if lesson in catalog.PAGE_IDS else len(catalog.PAGE_IDS)), (
        entry.get("kind", "run") != "run"
    )


def browser(lesson: str | None, expanded: bool = False) -> None:
    """All recorded results (lesson=None) or those of one lesson, one expander per group (GROUPS) that has any;
    nothing for a lesson that has none. Only the first shown opens expanded."""
    entries, err = backend.safe_list_recorded()
    if lesson is not None:
        entries = [e for e in entries if e.get("lesson") == lesson]
        if not entries:
            return
    shown = False
    for g in GROUPS:
        mine = sorted((e for e in entries if group(e) == g[0]), key=order)
        if mine or (g is GROUPS[0] and not entries):
            ns = f"recorded.{lesson or 'all'}" + ("" if g is GROUPS[0] else f".{g[0]}")
            _browse(mine, err, ns, g, expanded and not shown)
            shown = True


def _browse(entries: list[dict], err: str | None, ns: str, grp: tuple, expanded: bool) -> None:
    _, title, explain = grp
    with layout.lazy_expander(t(title), key=f"{ns}.open", expanded=expanded, icon=":material/history:") as open_:
        if not open_:
            return
        st.caption(t(explain))
        if err:
            engine_error(err)
            return
        if not entries:
            st.info(t("recorded.none"))
            return
        by_id = {e["id"]: e for e in entries}
        titles = {
            i: content.localized(content.meta(e.get("lesson") or catalog.HOME).get("title"), lang(), "")
            for i, e in by_id.items()
        }
        names = {lesson: short_names(lesson) for lesson in {e.get("lesson") for e in entries}}
        labels = {i: _short(_label(e), titles[i], names[e.get("lesson")]) for i, e in by_id.items()}
        chosen = st.selectbox(
            t("recorded.pick"), list(by_id), format_func=labels.__getitem__, key=widget_state.labelled(ns)
        )
        entry = by_id[chosen]
        full = _label(entry)
        st.caption(" · ".join(p for p in (full if full != labels[chosen] else "", _where(entry)) if p))
        result, err = backend.safe_load_recorded(chosen)
        if err:
            engine_error(err)
            return
        if not result:
            engine_error(chosen)
            return
        meta = content.meta(entry.get("lesson") or catalog.HOME)
        kind = entry.get("kind", "run")
        if kind == "leak":
            status = {"state": "done", "result": result}
            spec = {"label": _label(entry), "scenario": result.get("scenario")}
            leak_sandbox.show_results(
                {"specs": [spec], "statuses": [status]},
                meta,
                leak_sandbox.scenarios(entry.get("lesson") or catalog.LEAK_LESSON),
                ns=ns,
            )
        elif kind == "fragmentation":
            fragmentation_view.show(result, meta, key=ns)
        elif kind == "timing_rounds":
            lesson_id = entry.get("lesson") or catalog.HOME
            rset = next(
                (r for r in content.rounds_sets(meta) if catalog.rounds_set_id(lesson_id, r["id"]) == chosen), None
            )
            rounds_view.show(result, meta, key=ns, rset=rset)
        elif kind == "distributed":
            data_parallel_result.show_result(result, meta, key=ns)
        elif kind == "profile":
            results.device_label(result, entry.get("recorded_at"))
            results.render_profile(result)
            expect_view.checked(meta.get("profile_expect"), {"run": result})  # what the lesson says of this table
        else:
            results.render_run(result, meta, recorded_at=entry.get("recorded_at"), key=ns, driver=True)
