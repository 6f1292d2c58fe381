"""A sandbox's widget keys, which are also its URL parameters, and setting them from another panel (a "try this"
prompt's Apply, an error's fix, "use the batch that fits", the switch between CPU and full size)."""

from __future__ import annotations

import streamlit as st


def key(ns: str, field: str) -> str:
    # Also the URL query parameter name, so a shared link opens the same experiment on the same page.
    return f"{ns}_{field}"


def set_values(ns: str, values: dict) -> None:
    """Sets the sandbox's widgets; the page's next run draws them with these values."""
    for field, value in values.items():
        st.session_state[key(ns, field)] = value
