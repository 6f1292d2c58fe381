"""A technique's claim judged on a pair of runs (technique and baseline): the measured figure, the verdict against
the claimed range, the explanation it selects (checked against that pair), and for a time claim the verdict over
interleaved rounds instead of one pair."""

from __future__ import annotations

import streamlit as st

from app.backend import VERDICT_MIN_ROUNDS
from app.i18n import t
from app.ui import expect_view
from course import claims


def regime(base: dict) -> None:
    """Where a speed claim is judged: how busy the baseline kept the GPU (a few TFLOP/s is launch-bound)."""
    bound = claims.regime(base)
    if bound is None:
        return
    ms = (base.get("step_ms") or {}).get("median")
    st.caption(
        t("opt.regime." + bound, ms=f"{ms:.2f}", tflops=f"{base['tflops']:.1f}", threshold=claims.COMPUTE_BOUND_TFLOPS)
    )


def _oom(tech: dict, base: dict) -> None:
    for label, result in ((t("opt.technique"), tech), (t("opt.baseline"), base)):
        if result.get("oom"):
            st.error(t("opt.oom", which=label))


def verdict(meta: dict, technique: dict, tech: dict, base: dict, source: str) -> None:
    metric = technique.get("metric", "peak_saving_pct")
    value = claims.measure(metric, tech, base)
    st.metric(t("opt.measured." + metric, default=metric), claims.fmt(metric, value))
    st.caption(t("opt.source", source=source))
    if metric == "step_time_ratio":
        # One pair of runs is one sample of a ratio that moves by tens of percent between runs: no verdict.
        st.info(t("opt.one_pair"))
        regime(base)
        _oom(tech, base)
        return
    ok = claims.holds(value, technique.get("claimed_range"))
    if ok is True:
        st.success(t("opt.holds"))
    elif ok is False:
        st.warning(t("opt.not_holds"))
    else:
        st.info(t("opt.no_verdict"))
    key, checks = claims.explanation(technique, ok)
    why = expect_view.text(meta, technique.get(key)) if key else ""
    if why:
        st.markdown(why)
        # The explanation states what this pair shows: checked against it, like every prompt.
        expect_view.checked(checks, claims.runs(tech, base))
    _oom(tech, base)


def rounds_verdict(meta: dict, technique: dict, summary: dict, source: str, runs: dict) -> None:
    """A time claim judged over interleaved rounds: every round's paired ratio against the claimed range. The
    verdict picks the explanation, which is checked on `runs` (claims.runs: the rounds, and the pair if shown)."""
    rng = technique.get("claimed_range")
    ok = claims.holds_over_rounds(summary, rng)
    st.metric(t("opt.measured.paired_ratio"), f"{summary['median']:.2f}×")
    st.caption(
        t(
            "opt.paired_spread",
            lo=f"{summary['lo']:.2f}",
            hi=f"{summary['hi']:.2f}",
            rounds=summary["rounds"],
            range=claims.fmt_range("step_time_ratio", rng),
        )
        + " "
        + t("opt.source", source=source)
    )
    if ok is True:
        st.success(t("opt.rounds.holds"))
    elif ok is False:
        st.warning(t("opt.rounds.not_holds"))
    else:
        st.info(t("opt.rounds.undecided", min=VERDICT_MIN_ROUNDS))
    key, checks = claims.explanation(technique, ok)
    why = expect_view.text(meta, technique.get(key)) if key else ""
    if why:
        st.markdown(why)
        expect_view.checked(checks, runs)


def source(result: dict, full_width: int) -> str:
    """Where a pair ran, as the verdict names it: the GPU, or this CPU at a size k times smaller."""
    device = result.get("device") or {}
    where = device.get("name", "?") if device.get("type") == "cuda" else t("opt.cpu_source")
    width = (result.get("config") or {}).get("width")
    if width and width != full_width:
        where = t("opt.sized_source", source=where, k=full_width // width)
    return where
