"""GPU Memory Lab: the router. Sets the language, registers every page of app/views/ and runs the current one."""

from __future__ import annotations

import os
import signal
import sys
import threading

import altair as alt
import streamlit as st

# `app`, `course` and `experiments` are an installed project (requirements.txt installs it with `-e .`).
from app import backend
from app.i18n import LANGS, t
from app.ui import jobs, layout, widget_state
from course import catalog

# Half-width lesson columns on a projector (1024-1280 px): lesson code wraps instead of hiding its
# expected-output comments off the right edge, a metric shows its whole value, and a lesson's table
# stays inside its column (its code cells wrap; a static table's header words wrap and its cells keep 4 px at each
# side, so lesson 8's five columns fit a 1024 px page's half) instead of drawing over the experiment beside it. A row of widgets
# or metrics inside a column wraps to one per line when each would get less than 15rem (a selectbox cut to "MLP（Li");
# a multiselect chip shows its whole name, wrapped, instead of "append_loss_after_back…";
# below 1360 px the page's side margins give their room to the two columns.
STYLE = """<style>
[data-testid="stMarkdownContainer"] pre, [data-testid="stMarkdownContainer"] pre code {
  white-space: pre-wrap !important; overflow-wrap: anywhere; }
[data-testid="stMetricValue"], [data-testid="stMetricValue"] * { white-space: normal !important;
  overflow: visible !important; text-overflow: clip !important; overflow-wrap: anywhere; }
[data-testid="stMetricValue"] { font-size: clamp(1.15rem, 2vw, 1.75rem); line-height: 1.25; }
[data-testid="stMarkdownContainer"] table { display: block; max-width: 100%; overflow-x: auto; }
[data-testid="stMarkdownContainer"] td code, [data-testid="stMarkdownContainer"] th code {
  white-space: normal; overflow-wrap: anywhere; }
[data-testid="stTable"] th, [data-testid="stTable"] td { padding-left: 3px !important; padding-right: 3px !important; }
[data-testid="stTable"] th { white-space: normal !important; }
[data-testid="stColumn"] [data-testid="stHorizontalBlock"] { flex-wrap: wrap; }
[data-testid="stColumn"] [data-testid="stHorizontalBlock"] > [data-testid="stColumn"] { min-width: min(100%, 15rem); }
@media (max-width: 1360px) { [data-testid="stMainBlockContainer"] { padding-left: 1.5rem; padding-right: 1.5rem; } }
[data-testid="stMultiSelect"] [data-tag] { max-width: 100% !important; height: auto; }
[data-testid="stMultiSelect"] [data-tag] > span[title] { white-space: normal !important; overflow: visible !important;
  text-overflow: clip !important; overflow-wrap: anywhere; }
[data-testid="stSidebarNavLink"] span { white-space: normal !important; overflow: visible !important;
  text-overflow: clip !important; }
</style>"""


LANG_CHOICE = "lang_choice"


def choose_language() -> None:
    """The language radio's on_change: the only place, besides a session's first run, that sets the language."""
    if st.session_state.get(LANG_CHOICE) in LANGS:
        st.session_state["lang"] = st.session_state[LANG_CHOICE]
        widget_state.relabel()


def browser_language() -> str:
    locale = (st.context.locale or "").lower()
    return "zh" if locale.startswith("zh") else "en"


def main() -> None:
    # Altair validates every chart object against the Vega-Lite schema when it is built (its debug mode), up to
    # 0.5 s per lesson page run on 2 cores (cProfile); Streamlit's conversion still validates each chart once.
    alt.utils.schemapi.disable_debug_mode()
    st.set_page_config(page_title="GPU Memory Lab · 显存实验室", page_icon=str(layout.FAVICON), layout="wide")

    st.html(STYLE)
    if refuse_a_broken_limits_file():
        return
    # The page's language is a plain session key, never a widget's: Streamlit may drop a widget's state (a page
    # change, a stale-widget cleanup) and a radio recreated without it shows its first option, Chinese. The radio
    # below only proposes a change, through its callback.
    unusable = None
    if "lang" not in st.session_state:
        # A shared link's ?lang= wins over the browser's language; later the radio decides.
        wanted = st.query_params.get("lang")
        st.session_state["lang"] = wanted if wanted in LANGS else browser_language()
        unusable = None if wanted is None or wanted in LANGS else str(wanted)[:80]
    st.session_state[LANG_CHOICE] = st.session_state["lang"]
    with st.sidebar:
        st.radio(
            "语言 · Language",
            LANGS,
            format_func={"zh": "中文", "en": "English"}.__getitem__,
            horizontal=True,
            key=LANG_CHOICE,
            on_change=choose_language,
        )
    if st.query_params.get("lang") != st.session_state["lang"]:
        st.query_params["lang"] = st.session_state["lang"]
    if unusable is not None:  # said, as any other link value that is replaced (app/ui/urlstate.py)
        why = t("config.err.choice", value=unusable, allowed=", ".join(LANGS))
        st.warning(t("url.replaced", field="lang", value=unusable, fallback=st.session_state["lang"], why=why))

    pages = {
        p.id: st.Page(
            f"views/{p.id}.py", title=t("page." + p.id), icon=p.icon, url_path=p.id, default=p.id == catalog.HOME
        )
        for p in catalog.PAGES
    }
    current = st.navigation({t("nav." + g): [pages[i] for i in catalog.group(g)] for g in catalog.GROUPS})

    # Never wait for the device here: right after a server start the worker is still importing torch, and
    # the lesson must not wait for it (the parts that need the device wait where they are drawn). The slot
    # is filled again after the page, by when the worker has usually reported.
    slot = st.sidebar.empty()
    device_caption(slot, backend.device_info_nowait())
    current.run()
    device_caption(slot, backend.device_info_nowait())
    # The estimate processes (each imports torch) start once the server's first page is drawn, not while it is
    # drawn, and not when a graded tab first waits for them.
    backend.shared_pool()
    jobs.settle()


def refuse_a_broken_limits_file() -> bool:
    """An operator's limits file with an error: the terminal says which (once), the server stops, and a learner's
    page says only that it is not ready (never the server's path)."""
    problem = backend.limits_problem()
    if problem is None:
        return False
    if not _TOLD:
        _TOLD.append(True)
        print(
            f"GPU Memory Lab: {problem}. The server stops: fix the setting named and start it again.", file=sys.stderr
        )
        # Streamlit shuts its server down on SIGTERM: no class is served with a limit the operator did not mean.
        # Only a server that `streamlit run` started (its bootstrap module) stops: a test's script runner shares its
        # process with the tests.
        if "streamlit.web.bootstrap" in sys.modules:
            threading.Timer(2.0, os.kill, (os.getpid(), signal.SIGTERM)).start()
    st.error(t("server.limits_broken"))
    return True


_TOLD: list[bool] = []


def device_caption(slot, info: dict | None) -> None:
    with slot.container():
        if info is None:
            st.caption(t("sidebar.starting"))
        elif info.get("type") == "cuda":
            st.caption(t("sidebar.gpu", name=info.get("name", "GPU")))
            if info.get("shared_with_another_server"):
                st.warning(t("sidebar.shared_gpu"))
        else:
            st.caption(t("sidebar.cpu"))
            if info.get("shared_with_another_server"):
                st.warning(t("sidebar.shared_cpu"))


# The worker process is started with spawn, which re-imports the parent's __main__ module (this
# script, as Streamlit runs it) under the name __mp_main__: the UI must not run again there.
if __name__ != "__mp_main__":
    main()
