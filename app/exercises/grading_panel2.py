"""Exercise 2's graded panel: the budget challenge. Pick strategies; the worker measures your choice's memory,
checks its gradients, and times it, the baseline and the estimator's most promising fitting choices in interleaved
rounds of one job, run now; the page grades fit, correctness and speed (course/grading/ex2.py)."""

from __future__ import annotations

import json
import threading
from concurrent.futures import Future, ThreadPoolExecutor

import streamlit as st

from app import backend
from app.exercises import grading_view
from app.features import rounds_view
from app.i18n import t
from app.ui import jobs, results, urlstate, widget_state
from app.ui.errors import engine_error
from app.ui.failures import job_failed
from course.grading import ex2
from course.units import fmt_bytes

NS = "ex2g"

# The shortlist of choices worth timing takes a few dozen estimates: searched once per server and device, in the
# background, from the moment the page is first opened. Pure computation: no Streamlit call happens on this thread.
_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ex2-shortlist")
_searches: dict[tuple, Future] = {}
_lock = threading.Lock()


def _valid(config: dict):
    cfg, err = backend.config(config)
    if err:
        raise err
    return cfg


def estimate(config: dict, device_type: str) -> dict:
    """The grid's estimates on `device_type`, raising on failure (the page says why): this runs on the search's
    thread too, so it asks nothing of the session (no measured workspaces, no device)."""
    est, err = backend.estimate(_valid(config), for_device=device_type, measured_workspaces=False, wait=None)
    if err:
        raise RuntimeError(err)
    return est


def search(s: ex2.Settings, ch: dict, device_type: str, rates: dict | None) -> Future:
    key = (
        device_type,
        json.dumps(ch["base"], sort_keys=True),
        ch["budget"],
        json.dumps(rates, sort_keys=True),
        json.dumps(s.options, sort_keys=True),
        s.compare,
    )
    with _lock:
        if key not in _searches:
            step_ms = (lambda est, precision: backend.center_ms(est, rates, precision, device_type)) if rates else None
            _searches[key] = _pool.submit(ex2.shortlist, s, ch["base"], ch["budget"], device_type, estimate, step_ms)
        return _searches[key]


def _device() -> tuple[str, dict | None]:
    info, _ = backend.safe_device_info()
    cuda = bool(info and info.get("type") == "cuda")
    return ("cuda" if cuda else "cpu"), (info or {}).get("rates")


def choice_text(s: ex2.Settings, choice: dict) -> str:
    return t("ex2.sep").join(
        t("ex2.kv", field=t("field." + f), value=t(f"opt.{f}.{choice[f]}", default=str(choice[f]))) for f in s.fields
    )


def _parser(s: ex2.Settings, field: str, device_type: str):
    allowed = ex2.options(s, field, device_type)

    def parse(raw):
        value = backend.field_value(field, raw)  # the engine's type for the field (accum is an integer)
        if value not in allowed:
            raise ValueError(raw)
        return value

    return parse


def _task(s: ex2.Settings, ch: dict) -> None:
    base = ch["base"]
    st.markdown(
        t("ex2.task", layers=base["layers"], width=base["width"], batch=base["batch"], budget=fmt_bytes(ch["budget"]))
    )
    if ch["scaled"]:
        st.info(
            t(
                "ex2.scaled",
                share=f"{ch['share'] * 100:.1f}",
                gpu_peak=fmt_bytes(ch["gpu_peak"]),
                cpu_peak=fmt_bytes(ch["cpu_peak"]),
                budget=fmt_bytes(ch["budget"]),
                gpu_batch=s.gpu_base["batch"],
                gpu_layers=s.gpu_base["layers"],
                gpu_width=s.gpu_base["width"],
                gpu_budget=fmt_bytes(s.gpu_budget),
            ),
            icon=":material/straighten:",
        )


def render(meta: dict) -> None:
    slot = st.empty()
    device_type, rates = _device()
    try:
        s = ex2.settings(meta)
        ch = ex2.challenge(s, device_type, estimate)
    except Exception as exc:  # noqa: BLE001 - bad settings or an estimate failure: a message, not a broken page
        engine_error(f"{type(exc).__name__}: {exc}")
        return
    future = search(s, ch, device_type, rates)
    with st.container(border=True):
        st.subheader(t("ex2.title"))
        _task(s, ch)
        choice = {}
        cols = [col for _ in range(0, len(s.fields), 2) for col in st.columns(2)]
        for i, field in enumerate(s.fields):
            k = f"{NS}_{field}"
            allowed = list(ex2.options(s, field, device_type))
            urlstate.init(k, allowed[0], _parser(s, field, device_type))
            if st.session_state[k] not in allowed:  # a link made on a GPU opened on a CPU
                st.session_state[k] = allowed[0]
            labels = {v: t(f"opt.{field}.{v}", default=str(v)) for v in allowed}
            choice[field] = cols[i].selectbox(
                t("field." + field), allowed, format_func=labels.__getitem__, key=widget_state.labelled(k)
            )
            urlstate.sync(k, choice[field], allowed[0])
        est = estimate(ex2.config_of(ch["base"], choice), device_type)
        m = st.columns(2)
        m[0].metric(t("ex2.est_peak"), fmt_bytes(est["peak_bytes"]))
        m[1].metric(t("ex2.budget"), fmt_bytes(ch["budget"]))
        st.caption(t("ex2.est_fits") if est["peak_bytes"] <= ch["budget"] else t("ex2.est_no_fit"))
        done = jobs.panel(NS, t("ex2.run"), lambda: _group(s, ch, choice, future, device_type))
    if done:
        _show(s, meta, done)
    grading_view.show_progress(meta["id"], slot, s.total)


def _group(s: ex2.Settings, ch: dict, choice: dict, future, device_type: str) -> tuple[list, dict]:
    """The learner's run, its guard and the timed rounds against the shortlist (searched meanwhile: `future`)."""
    with st.spinner(t("ex2.searching")):
        short = future.result()
    base = ch["base"]
    params, roles = ex2.rounds_job(s, base, choice, short, device_type)
    mine = _valid(ex2.run_config(base, choice)).to_dict()
    specs = [
        {"label": t("ex2.label.candidate"), "kind": "run", "params": mine},
        {"label": t("ex2.label.guard"), "kind": "guard", "params": mine},
        # Timed now, in one job: a cached timing was taken at another moment, under another load.
        {"label": t("ex2.label.rounds"), "kind": "timing_rounds", "params": params, "fresh": True},
    ]
    return specs, {"roles": roles, "choice": choice, "short": short, "budget": ch["budget"]}


def _names(s: ex2.Settings, roles: dict) -> dict[str, str]:
    """Strategy id -> the short name the rounds' charts and lines give it."""
    names = {sid: t("ex2.short.option", n=i + 1) for i, sid in enumerate(roles["compared"])}
    names[roles["baseline"]] = t("ex2.short.baseline")
    names[roles["candidate"]] = t("ex2.short.candidate")
    return names


def _show(s: ex2.Settings, meta: dict, done: dict) -> None:
    tag = done["tag"]
    got = {}
    for spec, status in zip(done["specs"], done["statuses"], strict=True):
        if status.get("state") == "done" and status.get("result") is not None:
            got[spec["kind"]] = status["result"]
        else:
            job_failed(status, spec["label"])
    if "run" not in got:
        return
    roles, rounds = tag["roles"], got.get("timing_rounds")
    a = ex2.assess(s, got["run"], got.get("guard"), rounds, roles, tag["budget"])
    grading_view.record(meta["id"], a["passed"], s.total)
    st.divider()
    st.subheader(t("ex2.score", score=a["score"]) if a["score"] is not None else t("ex2.score_busy"))
    results.device_label(got["run"])
    guard = got.get("guard") or {}
    peak = fmt_bytes(a["peak"])
    grading_view.check_line(
        a["checks"]["fit"],
        t("ex2.check.fit" if a["checks"]["fit"] else "ex2.check.no_fit", peak=peak, budget=fmt_bytes(tag["budget"])),
    )
    grading_view.check_line(
        a["checks"]["correct"],
        t(
            "ex2.check.correct" if a["checks"]["correct"] else "ex2.check.wrong",
            rel=f"{guard.get('max_rel_diff', float('nan')):.2e}",
            tol=f"{guard.get('tolerance', float('nan')):.0e}",
        ),
    )
    if rounds and not a["speed_judged"]:
        st.info(t("ex2.check.busy"), icon=":material/hourglass_top:")
    else:
        grading_view.check_line(
            a["checks"]["fast"],
            t("ex2.check.fast" if a["checks"]["fast"] else "ex2.check.slow", pct=f"{s.speed_slack * 100:.0f}"),
        )
    if a["why"]:
        st.markdown(grading_view.say_all(a["why"]))
    _best_line(s, tag, a)
    if rounds:
        names = _names(s, roles)
        st.markdown("\n".join(_run_lines(s, tag, a, got["run"], rounds, names)))
        with st.expander(t("ex2.rounds_title", rounds=rounds.get("rounds")), icon=":material/timer:"):
            rounds_view.show(rounds, meta, key=f"{NS}.rounds", names=names)


def _best_line(s: ex2.Settings, tag: dict, a: dict) -> None:
    short, roles = tag["short"], tag["roles"]
    if a["best"] is None:
        if not short["choices"]:
            st.warning(t("ex2.none_fits", considered=short["considered"], lowest=fmt_bytes(short["lowest_peak"])))
        return
    key = "ex2.best_known.yours" if a["best"] == roles["candidate"] else "ex2.best_known.measured"
    st.caption(
        t(
            key,
            choice=choice_text(s, _choice(s, a["best"], tag)),
            timed=len(a["eligible"]),
            compare=len(short["choices"]),
            fitting=short["fitting"],
            considered=short["considered"],
            ranked=t("ex2.ranked_by." + short["ranked_by"]),
        )
    )


def _choice(s: ex2.Settings, sid: str, tag: dict) -> dict:
    if sid == tag["roles"]["candidate"]:
        return tag["choice"]
    return next(c["choice"] for c in tag["short"]["choices"] if ex2.choice_id(s, c["choice"]) == sid)


def _run_lines(s: ex2.Settings, tag: dict, a: dict, run: dict, rounds: dict, names: dict) -> list[str]:
    """One line per timed choice: its memory (measured for yours, estimated for the others) and its time over rounds."""
    roles, base = tag["roles"], tag["roles"]["baseline"]
    estimated = {ex2.choice_id(s, c["choice"]): c["peak_bytes"] for c in tag["short"]["choices"]}
    lines = []
    for row in rounds.get("strategies") or []:
        sid = row["id"]
        if sid == roles["candidate"]:
            net, how = backend.net_peak(run), t("ex2.peak.measured")
        elif sid in estimated:
            net, how = estimated[sid], t("ex2.peak.estimated")
        else:
            net, how = None, ""
        fits = "—" if net is None else (":green[✓]" if net <= tag["budget"] else ":red[✗]")
        vs = backend.paired(rounds, sid, base) if sid != base else None
        line = t(
            "ex2.run_line",
            peak=fmt_bytes(net) if net is not None else "—",
            how=how,
            fits=fits,
            ms=f"{row['median_ms']:,.2f}",
            ratio=t("ex2.vs_base", ratio=f"{vs['median']:.2f}", lo=f"{vs['lo']:.2f}", hi=f"{vs['hi']:.2f}")
            if vs
            else "",
        )
        choice = ex2.choice_of(s, row.get("config") or {})
        best = t("ex2.best_mark") if sid == a["best"] else ""
        lines.append("- " + t("ex2.run_item", label=names[sid], choice=choice_text(s, choice), line=line) + best)
    return lines
