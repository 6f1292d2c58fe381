"""Widget values <-> URL query parameters, stored as raw values (fp32, 64), never as translated labels.

Streamlit's own bind="query-params" stores a selectbox's *formatted label*, so a link made in Chinese
would not open in English; this keeps links language-independent.
"""

from __future__ import annotations

import streamlit as st

from app.i18n import t


def init(key: str, default, parse) -> None:
    """Before a widget is drawn: its value comes from the URL if the session has none yet, else the default.

    `parse(raw: str | list[str])` returns the value or raises ValueError for an unusable parameter.
    """
    if key in st.session_state:
        return
    value = default
    if key in st.query_params:
        raw = st.query_params.get_all(key)
        try:
            value = parse(raw if len(raw) > 1 else raw[0])
        except (ValueError, TypeError, IndexError) as exc:
            value = default
            # Said on the page: a link whose value was silently replaced shows something else than was shared.
            shown = ", ".join(raw)[:80]
            code = getattr(exc, "code", None)  # a ConfigError: worded in the learner's language by its rule
            why = (code and t("config.err." + code, default="", **exc.params)) or getattr(exc, "message", str(exc))
            if isinstance(exc, Unusable):
                why = t(exc.why_key, **exc.params)
            st.warning(t("url.replaced", field=key, value=shown, fallback=default, why=why[:200]))
    st.session_state[key] = value


class Unusable(ValueError):
    """A link value a parser refuses, with the reason as a sentence key and its values (worded in the page's language)."""

    def __init__(self, key: str, **params):
        super().__init__(key)
        self.why_key, self.params = key, params


def one_of(options):
    """A parser for `init`: the raw value if it is one of `options`, else refused (and said on the page)."""

    def parse(raw):
        if raw not in options:
            listed = [str(o) for o in options]
            shown = ", ".join(listed[:8])
            if len(listed) > 8:
                shown = t("url.why.more", shown=shown, n=len(listed) - 8)
            raise Unusable("url.why.choice", allowed=shown)
        return raw

    return parse


def number_in(lo: float, hi: float, whole: bool = False):
    """A parser for `init`: a number from lo to hi (a whole one if `whole`), else refused: never clamped or replaced
    without a word (a link's 10^9 became the widget's largest value, silently)."""

    def parse(raw):
        value = float(raw)
        if not lo <= value <= hi or (whole and value != int(value)):
            raise Unusable("url.why.whole" if whole else "url.why.number", lo=f"{lo:g}", hi=f"{hi:g}")
        return int(value) if whole else value

    return parse


def on_off(raw) -> bool:
    """A parser for `init`: a switch's link value (true or false, as `sync` writes it; 1 or 0), else refused."""
    word = str(raw).lower()
    if word not in ("true", "false", "1", "0"):
        raise Unusable("url.why.choice", allowed="true, false")
    return word in ("true", "1")


def sync(key: str, value, default) -> None:
    """After a widget is drawn: only values that differ from the page default go into the URL."""
    if value == default:
        if key in st.query_params:
            del st.query_params[key]
        return
    wanted = [str(v) for v in value] if isinstance(value, (list, tuple)) else "none" if value is None else str(value)
    current = st.query_params.get_all(key)
    if current != (wanted if isinstance(wanted, list) else [wanted]):
        st.query_params[key] = wanted


def drop(key: str) -> None:
    if key in st.query_params:
        del st.query_params[key]
