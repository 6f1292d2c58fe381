"""A sandbox's widget keys, which are also its URL parameters, and setting them from another panel (a "try this"
prompt's Apply, an error's fix, "use the batch that fits", the switch between CPU and full size)."""

from __future__ import annotations

import streamlit as st


def key(ns: str, field: str) -> str:
    # Also the URL query parameter name, so a shared link opens the same experiment on the same page.
    return f"{ns}_{field}"


# Choice widgets whose options are drawn with labels in the page's language (see relabel).
LABELLED = "_widget_state.labelled"


def labelled(k: str) -> str:
    """Marks a keyed choice widget (selectbox, radio, multiselect) whose labels are in the page's language; returns
    the key. A keyed widget keeps its identity when its labels change, so the browser would go on showing (and
    sending back) the previous language's label: `relabel` sets its value again on a language switch."""
    st.session_state.setdefault(LABELLED, set()).add(k)
    return k


def relabel() -> None:
    """The language switch's on_change: it runs before the page, while each value still reads through the labels it
    was drawn with; setting it again makes the next run send the browser the value under the new language's label,
    so no widget loses its value (or its URL parameter) and none shows the old language."""
    for k in st.session_state.get(LABELLED, ()):
        if k in st.session_state:
            st.session_state[k] = st.session_state[k]


def set_values(ns: str, values: dict) -> None:
    """Sets the sandbox's widgets; the page's next run draws them with these values."""
    for field, value in values.items():
        st.session_state[key(ns, field)] = value
