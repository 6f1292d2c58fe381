"""The "Your model" page opens the JSON a command-line run wrote (`python -m experiments estimate|fits|run ...
--json`): a model given by an import path runs only on the learner's machine, and its result is data the page shows
with the same views as its own results (course/cli_result.py checks it first; nothing in it is executed)."""

from __future__ import annotations

import streamlit as st

from app.features import own_model
from app.i18n import t
from course import cli_result


def opened() -> None:
    with st.expander(t("ym.open")):
        st.caption(t("ym.open_help"))
        upload = st.file_uploader(t("ym.open_file"), type=["json"], key="ym.open")
        if upload is None:
            return
        try:
            kind, data = cli_result.read(upload.getvalue())
        except cli_result.NotAResult as e:
            st.error(t("ym.open_bad", why=str(e)))
            return
        st.markdown(f"**{t('ym.open_kind.' + kind)}**")
        described = cli_result.describe(data)
        if described:
            st.text(described)  # as text: a file's strings are never rendered as markup
        if kind == "cannot_predict":
            st.warning(data["cannot_predict"]["message"][:500])
        elif kind == "estimate":
            own_model.show_estimate(data)
        elif kind == "fits":
            own_model.show_fits(data)
        else:
            own_model.show_run(data)
