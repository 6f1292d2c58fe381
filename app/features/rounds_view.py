"""Step times of several strategies measured in interleaved, repeated rounds (experiments/measure/timing.py), compared
round by round: per round, each strategy's time over the first strategy's (experiments/core/metrics.py: paired)."""

from __future__ import annotations

import streamlit as st

from app import backend
from app.backend import VERDICT_MIN_ROUNDS, paired
from app.charts import ratios, rounds
from app.i18n import lang, t
from app.ui import jobs, layout, results, sizing
from app.ui.failures import job_failed
from course import catalog, content


def titles(meta: dict, rset: dict | None = None) -> dict[str, str]:
    """Strategy id -> its short name (else its title): of a rounds set, or of the lesson's strategies (the comparison
    page). Charts name a row in a projector's half-width column, with no room for a full title."""
    items = (rset or {}).get("strategies") if rset else meta.get("strategies")
    return {s["id"]: content.localized(s.get("short") or s.get("title"), lang(), s["id"]) for s in items or []}


def verdict_text(summary: dict) -> str:
    return t(
        "rounds.verdict." + summary["verdict"],
        slower=summary["slower"],
        faster=summary["faster"],
        rounds=summary["rounds"],
        min=VERDICT_MIN_ROUNDS,
    )


def paired_lines(result: dict, names: dict[str, str]) -> list[tuple[str, dict]]:
    """(Markdown line, paired summary) for every strategy against the first: the numbers the box states."""
    rows = result.get("strategies") or []
    if len(rows) < 2:
        return []
    first = rows[0]["id"]
    out = []
    for r in rows[1:]:
        summary = paired(result, r["id"], first)
        if summary is None:
            continue
        line = t(
            "rounds.paired",
            name=names.get(r["id"], r["id"]),
            versus=names.get(first, first),
            median=f"{summary['median']:.2f}",
            lo=f"{summary['lo']:.2f}",
            hi=f"{summary['hi']:.2f}",
            rounds=summary["rounds"],
            verdict=verdict_text(summary),
        )
        out.append((line, summary))
    return out


def show(result: dict, meta: dict, key: str, rset: dict | None = None, names: dict[str, str] | None = None) -> None:
    """The rounds result: each round's medians, then the paired ratios with their spread and verdict. The
    comparison page's "rounds" prompt goes under it (a rounds set, or a pair given `names`, carries none)."""
    prompted = rset is None and names is None and "rounds" in (meta.get("prompts") or {})
    names = {**{s["id"]: s["id"] for s in result.get("strategies") or []}, **(names or titles(meta, rset))}
    results.device_label(result, result.get("started_at"))
    st.caption(t("rounds.explain", steps=result.get("steps"), rounds=result.get("rounds")))
    df = rounds.frame(result, names)
    if df.empty:
        return
    rows = result.get("strategies") or []
    st.markdown(f"##### {t('rounds.chart_times')}")
    layout.altair(rounds.chart(df))
    # Lines, not a table: they wrap in a half-width column on a projector, where a table hides its numbers.
    st.markdown(
        "\n".join(
            "- "
            + t(
                "rounds.line",
                name=names.get(r["id"], r["id"]),
                median=f"{r['median_ms']:.3f}",
                lo=f"{r['min_ms']:.3f}",
                hi=f"{r['max_ms']:.3f}",
            )
            for r in rows
        )
    )
    versus = names.get(rows[0]["id"], rows[0]["id"])
    pdf = ratios.frame(result, names, rows[0]["id"])
    if not pdf.empty:
        st.markdown(f"##### {t('rounds.chart_paired', versus=versus)}")
        st.caption(t("rounds.paired_explain", versus=versus, min=VERDICT_MIN_ROUNDS))
        layout.altair(ratios.chart(pdf, versus))
        st.markdown("\n".join(f"- {line}" for line, _ in paired_lines(result, names)))
    if prompted:
        layout.prompts(meta, "rounds", {"rounds": result}, key=key)


def runs_here(rset: dict) -> bool:
    """Whether this machine may run the set live (a set that is GPU-only says so with "devices")."""
    devices = rset.get("devices")
    if not devices:
        return True
    info, _ = backend.safe_device_info()
    return bool(info) and info.get("type") in devices


def live(
    ns: str,
    label: str,
    params: dict,
    meta: dict,
    rset: dict | None = None,
    names: dict | None = None,
    button: str | None = None,
) -> dict | None:
    """A Run button for a timing_rounds job and its result once done; returns the result."""
    spec = {"label": label, "kind": "timing_rounds", "params": params}
    done = jobs.panel(ns, button or t("rounds.run"), [spec], primary=False)
    if not done:
        return None
    status = done["statuses"][0]
    if status.get("state") == "done" and status.get("result"):
        show(status["result"], meta, key=f"{ns}.live", rset=rset, names=names)
        return status["result"]
    job_failed(status)
    return None


def set_box(lesson_id: str, meta: dict, rset: dict) -> None:
    """One rounds set of a lesson: run it here (CPU-sized without a GPU) and see the H200's recording."""
    ns = f"{lesson_id}.rounds.{rset['id']}"
    title = content.localized(rset.get("title"), lang(), rset["id"])
    with st.container(border=True):
        st.subheader(title)
        done = None
        if runs_here(rset):
            done = live(ns, title, content.rounds_set_params(meta, rset, sizing.of(meta).scale), meta, rset)
        else:
            st.caption(t("rounds.gpu_only"))
        rec, _ = backend.safe_load_recorded(catalog.rounds_set_id(lesson_id, rset["id"]))
        if rec:
            name = (rec.get("device") or {}).get("name", "GPU")
            with st.expander(t("rounds.recorded", name=name), icon=":material/history:", expanded=done is None):
                show(rec, meta, key=f"{ns}.recorded", rset=rset)
        else:
            st.caption(t("rounds.not_recorded"))


def set_boxes(lesson_id: str, meta: dict) -> None:
    for rset in content.rounds_sets(meta):
        set_box(lesson_id, meta, rset)
