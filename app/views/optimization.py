import streamlit as st

from app.features import recorded_view, technique
from app.i18n import lang, t
from app.ui import layout, sandbox, urlstate, widget_state
from course import content

meta, _, right = layout.lesson_page("optimization")
with right:
    techniques = {x["id"]: x for x in meta.get("techniques") or [] if isinstance(x, dict) and x.get("id")}
    if techniques:
        with st.container(border=True):
            st.subheader(t("opt.title"))
            # A selectbox, not tabs: lessons list about ten techniques, too many tabs for half a screen. It shows
            # short names (a long title is cut in a projector's half-width column); the full title goes under it.
            titles = {tid: content.localized(x.get("title"), lang(), tid) for tid, x in techniques.items()}
            short = {tid: content.localized(x.get("short"), lang(), titles[tid]) for tid, x in techniques.items()}
            first = next(iter(techniques))
            urlstate.init("optimization_technique", first, urlstate.one_of(techniques))
            chosen = st.selectbox(
                t("opt.pick"),
                list(techniques),
                format_func=short.__getitem__,
                key=widget_state.labelled("optimization_technique"),
                persist_state="session",
            )
            urlstate.sync("optimization_technique", chosen, first)
            st.markdown(f"**{titles[chosen]}**")
            technique.render(meta, techniques[chosen])
    sandbox.render("optimization", meta)
    recorded_view.browser("optimization")
