"""Lesson runs sized for the machine: with no GPU, each lesson's preset (and its "try this" changes) starts
`cpu_scale` times smaller in width and batch, so a live CPU run charts in seconds. Proportions are kept
(course/content.py: sized), the page says so, and one click brings the full size back."""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from app import backend
from app.i18n import t
from app.ui import widget_state
from course import content


def _full_key(meta: dict) -> str:
    return f"sizing.full.{meta.get('id', '')}"


@dataclass(frozen=True)
class Size:
    """A lesson page's run size, read once per script run and handed down. `offered`: the lesson's CPU factor where
    the worker has no GPU (1 elsewhere); `scale`: that factor while the learner keeps the CPU size, else 1."""

    meta: dict
    offered: int
    scale: int

    @property
    def active(self) -> bool:
        """True while this lesson's runs are CPU-sized in this session."""
        return self.scale > 1

    def over_preset(self, diff: dict | None = None) -> dict:
        return content.over_preset(self.meta, diff, self.scale)

    def change(self, diff: dict | None) -> dict:
        return content.sized_change(self.meta, diff, self.scale)

    def words(self, kind: str | None) -> dict[str, str]:
        return content.config_words(self.meta, kind, self.scale)


def of(meta: dict) -> Size:
    k = content.cpu_scale(meta)
    offered = k if k > 1 and _cpu_worker() else 1
    return Size(meta, offered, 1 if st.session_state.get(_full_key(meta)) else offered)


def _cpu_worker() -> bool:
    info, _ = backend.safe_device_info()
    return bool(info) and info.get("type") == "cpu"


def _set_full(meta: dict, value: bool, ns: str, config: dict) -> None:
    st.session_state[_full_key(meta)] = value
    widget_state.set_values(ns, config)


def banner(size: Size, ns: str) -> None:
    """Says that (and how) this page's runs are CPU-sized, with the switch between the two sizes."""
    k, meta = size.offered, size.meta
    if k <= 1:
        return
    full = content.over_preset(meta, None)
    small = content.over_preset(meta, None, k)
    if size.active:
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
