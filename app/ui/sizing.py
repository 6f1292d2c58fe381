"""Lesson runs sized for the machine: with no GPU, each lesson's preset (and its "try this" changes) starts
`cpu_scale` times smaller in width and batch, so a live CPU run charts in seconds. Proportions are kept
(course/content.py: sized), the page says so, and one click brings the full size back."""

from __future__ import annotations

import streamlit as st

from app import backend
from app.i18n import t
from app.ui import widget_state
from course import content


def _full_key(meta: dict) -> str:
    return f"sizing.full.{meta.get('id', '')}"


def active(meta: dict) -> bool:
    """True while this lesson's runs are CPU-sized in this session: the worker has no GPU and the learner has
    not asked for the full size on this page."""
    return content.cpu_scale(meta) > 1 and not st.session_state.get(_full_key(meta)) and _cpu_worker()


def _cpu_worker() -> bool:
    info, _ = backend.safe_device_info()
    return bool(info) and info.get("type") == "cpu"


def scale(meta: dict) -> int:
    return content.cpu_scale(meta) if active(meta) else 1


def preset(meta: dict) -> dict:
    return content.over_preset(meta, None, scale(meta))


def over_preset(meta: dict, diff: dict | None) -> dict:
    return content.over_preset(meta, diff, scale(meta))


def change(meta: dict, diff: dict | None) -> dict:
    return content.sized_change(meta, diff, scale(meta))


def words(meta: dict, kind: str | None) -> dict[str, str]:
    return content.config_words(meta, kind, scale(meta))


def _set_full(meta: dict, value: bool, ns: str, config: dict) -> None:
    st.session_state[_full_key(meta)] = value
    widget_state.set_values(ns, config)


def banner(meta: dict, ns: str) -> None:
    """Says that (and how) this page's runs are CPU-sized, with the switch between the two sizes."""
    k = content.cpu_scale(meta)
    if k <= 1 or not _cpu_worker():
        return
    full = content.over_preset(meta, None)
    small = content.over_preset(meta, None, k)
    if active(meta):
        st.info(
            t(
                "sizing.cpu",
                k=k,
                k2=k * k,
                width=small.get("width"),
                batch=small.get("batch"),
                full_width=full.get("width"),
                full_batch=full.get("batch"),
            ),
            icon=":material/memory:",
        )
        st.button(
            t("sizing.use_full"), key=f"{ns}.sizing.full", on_click=_set_full, args=(meta, True, ns, _typed(full))
        )
    else:
        st.caption(t("sizing.full_now", k=k))
        st.button(
            t("sizing.use_cpu"), key=f"{ns}.sizing.cpu", on_click=_set_full, args=(meta, False, ns, _typed(small))
        )


def _typed(config: dict) -> dict:
    cfg, err = backend.config(config)
    return {} if err else cfg.to_dict()
