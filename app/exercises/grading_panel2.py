"""Exercise 2's graded panel: the budget challenge. Pick strategies; the worker runs the baseline, your
choice and the best known choice, and checks your gradients; the page grades fit, correctness and speed."""

from __future__ import annotations

import json
import threading
from concurrent.futures import Future, ThreadPoolExecutor

import streamlit as st

from app import backend
from app.exercises import grading_view
from app.i18n import t
from app.ui import jobs, results, urlstate, widget_state
from app.ui.errors import engine_error
from app.ui.failures import job_failed
from course.grading import ex2
from course.units import fmt_bytes

NS = "ex2g"

# The best known choice takes a few dozen estimates: searched once per server and device, in the background,
# from the moment the page is first opened. Pure computation: no Streamlit call happens on this thread.
_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ex2-best-known")
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
    )
    with _lock:
        if key not in _searches:
            step_ms = (lambda est, precision: backend.center_ms(est, rates, precision, device_type)) if rates else None
            _searches[key] = _pool.submit(ex2.best_known, s, ch["base"], ch["budget"], device_type, estimate, step_ms)
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
        run = st.button(t("ex2.run"), key=f"{NS}.run", type="primary", disabled=jobs.pending(NS), width="stretch")
    if run:
        with st.spinner(t("ex2.searching")):
            best = future.result()
        _submit(ch, choice, best)
    jobs.poll(NS)
    done = jobs.finished(NS)
    if done:
        jobs.explain_cached(done)
        _show(s, meta, done)
    grading_view.show_progress(meta["id"], slot, s.total)


def _submit(ch: dict, choice: dict, best: dict) -> None:
    base, roles = ch["base"], ["baseline", "candidate"]
    specs = [
        {"label": t("ex2.label.baseline"), "kind": "run", "params": _valid(base).to_dict()},
        {"label": t("ex2.label.candidate"), "kind": "run", "params": _valid(ex2.config_of(base, choice)).to_dict()},
    ]
    if best["choice"] and best["choice"] != choice:
        roles.append("best")
        specs.append(
            {
                "label": t("ex2.label.best"),
                "kind": "run",
                "params": _valid(ex2.config_of(base, best["choice"])).to_dict(),
            }
        )
    roles.append("guard")
    specs.append({"label": t("ex2.label.guard"), "kind": "guard", "params": specs[1]["params"]})
    jobs.start(NS, specs, tag={"roles": roles, "choice": choice, "best": best, "budget": ch["budget"]})


def _show(s: ex2.Settings, meta: dict, done: dict) -> None:
    tag = done["tag"]
    got = {}
    for role, spec, status in zip(tag["roles"], done["specs"], done["statuses"], strict=True):
        if status.get("state") == "done" and status.get("result") is not None:
            got[role] = status["result"]
        else:
            job_failed(status, spec["label"])
    if "candidate" not in got:
        return
    best_result = got.get("best", got["candidate"] if tag["best"]["choice"] == tag["choice"] else None)
    a = ex2.assess(s, got["candidate"], got.get("baseline"), best_result, got.get("guard"), tag["budget"])
    grading_view.record(meta["id"], a["passed"], s.total)
    st.divider()
    st.subheader(t("ex2.score", score=a["score"]))
    results.device_label(got["candidate"])
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
    grading_view.check_line(
        a["checks"]["fast"],
        t("ex2.check.fast" if a["checks"]["fast"] else "ex2.check.slow", pct=f"{s.speed_slack * 100:.0f}"),
    )
    if a["why"]:
        st.markdown(grading_view.say_all(a["why"]))
    if a["ms"] and a["best_ms"] and a["ms"] < a["best_ms"] / (1 + s.speed_slack):
        st.info(t("ex2.beat", ms=f"{a['ms']:,.2f}", best_ms=f"{a['best_ms']:,.2f}"))
    best = tag["best"]
    if best["choice"]:
        st.caption(
            t(
                "ex2.best_known." + best["ranked_by"],
                choice=choice_text(s, best["choice"]),
                fitting=best["fitting"],
                considered=best["considered"],
                peak=fmt_bytes(best["peak_bytes"]),
            )
        )
    else:
        st.warning(t("ex2.none_fits", considered=best["considered"], lowest=fmt_bytes(best["lowest_peak"])))
    lines = []
    for role, label in (
        ("baseline", t("ex2.label.baseline")),
        ("candidate", t("ex2.label.candidate")),
        ("best", t("ex2.label.best")),
    ):
        r = got.get(role) if role != "best" else best_result
        if r is None:
            continue
        net = backend.net_peak(r)
        step = (r.get("step_ms") or {}).get("median")
        fits = net is not None and net <= tag["budget"] and not r.get("oom")
        line = t(
            "ex2.run_line",
            peak=fmt_bytes(net),
            fits=":green[✓]" if fits else ":red[✗]",
            ms=f"{step:,.2f}" if step is not None else "—",
        )
        lines.append("- " + t("ex2.run_item", label=label, choice=choice_text(s, _choice_of(s, r)), line=line))
    st.markdown("\n".join(lines))


def _choice_of(s: ex2.Settings, result: dict) -> dict:
    config = result.get("config") or {}
    return {f: config.get(f) for f in s.fields}
