"""An engine failure on the page: said, never raised (the page keeps working)."""

from __future__ import annotations

import streamlit as st

from app.i18n import t


def engine_error(message: str) -> None:
    st.error(t("error.engine", message=message))
