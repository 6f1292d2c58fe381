"""The "Fine-tuning memory" lesson's parts: its runs' setups in short words, and its graded exercise (the learner's
own configuration, replayed and judged on the exercise's card as "What fits" judges a batch: experiments/distributed/
method_fits.py, one row; graded by course/finetune_lesson.exercise_verdict)."""

from __future__ import annotations

import streamlit as st

from app import backend
from app.i18n import lang, t
from course import finetune_lesson as fl
from course.cards import CARDS, overhead
from course.units import GIB, fmt_bytes

KEY = "ft.exercise_result"


def setup_label(levers: dict) -> str:
    return " · ".join(t(key, **params) for key, params in fl.setup_parts(levers))


def exercise(meta: dict, cfg) -> None:
    ex = meta["exercise"]
    card = next(c for c in CARDS if c["id"] == ex["card"])
    name = card["name"][lang()]
    with st.container(border=True):
        st.subheader(t("ft.ex.title"))
        st.markdown(t("ft.ex.task", min_seq=ex["min_seq_len"], card=name, gib=f"{card['total_bytes'] / GIB:.2f}"))
        if cfg is not None and st.button(t("ft.ex.check"), key="ft.exercise_check", type="primary"):
            with st.spinner(t("ym.fits_searching")):
                res, err = backend.what_fits(
                    cfg, card["total_bytes"], wait=None, overhead=overhead(card["arch"])["bytes"], methods="own"
                )
            st.session_state[KEY] = (cfg.to_dict(), res, err)
        kept = st.session_state.get(KEY)
        if cfg is None:
            return
        for_cfg, res, err = kept if kept else (None, None, None)
        if for_cfg != cfg.to_dict():  # a check of other levers says nothing about these
            res, err = None, None
        if err:
            st.error(err)
            return
        passed, reasons = fl.exercise_verdict(ex, cfg.to_dict(), res)
        row = (res or {}).get("methods", [{}])[0]
        peak = fmt_bytes(row["peak_bytes"]) if row.get("peak_bytes") else "—"
        if passed:
            st.success(t("ft.ex.pass", card=name, peak=peak))
            return
        known = [r for r in reasons if r != "unchecked"]  # what stands in the way before any check
        if not known:
            st.caption(t("ft.ex.reason.unchecked"))
            return
        if "too_big" in known and (row.get("peak_bytes") or 0) > card["total_bytes"]:  # past the card by itself
            known[known.index("too_big")] = "too_big_peak"
        gib = f"{card['total_bytes'] / GIB:.2f}"
        lines = [t(f"ft.ex.reason.{r}", min_seq=ex["min_seq_len"], card=name, peak=peak, gib=gib) for r in known]
        st.warning(t("ft.ex.fail") + "\n\n" + "\n".join(f"- {line}" for line in lines))
