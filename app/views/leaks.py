import streamlit as st

from app import layout, leak_sandbox, recorded_view, sandbox
from app.i18n import t

meta, _, right = layout.lesson_page("leaks")
with right:
    leak_sandbox.render("leaks", meta)
    st.subheader(t("leak.baseline"))
    st.caption(t("leak.baseline_explain"))
    sandbox.render("leaks", meta)
    recorded_view.browser("leaks")
