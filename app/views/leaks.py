import streamlit as st

from app.features import leak_sandbox, recorded_view
from app.i18n import t
from app.ui import layout, sandbox

meta, _, right = layout.lesson_page("leaks")
with right:
    leak_sandbox.render("leaks", meta)
    st.subheader(t("leak.baseline"))
    st.caption(t("leak.baseline_explain"))
    sandbox.render("leaks", meta)
    recorded_view.browser("leaks")
