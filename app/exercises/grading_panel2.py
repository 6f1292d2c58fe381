"""Exercise 2's graded panel: the budget challenge. Pick strategies; the worker runs the baseline, your
choice and the best known choice, and checks your gradients; the page grades fit, correctness and speed."""

from __future__ import annotations

import functools
import json
import threading
from concurrent.futures import Future, ThreadPoolExecutor

import streamlit as st

from app import backend
from app.exercises import grading_view
from app.i18n import t
from app.ui import jobs, results, urlstate
from app.ui.failures import job_failed
from course.grading.ex2 import (
    CHOICE_FIELDS,
    GPU_BASE,
    GPU_BUDGET,
    SPEED_SLACK,
    assess,
    best_known,
    challenge,
    config_of,
    options,
)
from course.units import fmt_bytes

LESSON = "exercise2"
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
    est, err = backend.estimate(_valid(config), for_device=device_type, measured_workspaces=False)
    if err:
        raise RuntimeError(err)
    return est


@functools.lru_cache(maxsize=4)
def _challenge(device_type: str) -> dict:
    return challenge(device_type, estimate)


def search(ch: dict, device_type: str, rates: dict | None) -> Future:
    key = (device_type, json.dumps(ch["base"], sort_keys=True), ch["budget"], json.dumps(rates, sort_keys=True))
    with _lock:
        if key not in _searches:
            step_ms = (lambda est, precision: backend.center_ms(est, rates, precision, device_type)) if rates else None
            _searches[key] = _pool.submit(best_known, ch["base"], ch["budget"], device_type, estimate, step_ms)
        return _searches[key]


def _device() -> tuple[str, dict | None]:
    info, _ = backend.safe_device_info()
    cuda = bool(info and info.get("type") == "cuda")
    return ("cuda" if cuda else "cpu"), (info or {}).get("rates")


def choice_text(choice: dict) -> str:
    return t("ex2.sep").join(t("ex2.kv", field=t("field." + f), value=t(f"opt.{f}.{choice[f]}", default=str(choice[f])))
                             for f in CHOICE_FIELDS)


def _parser(field: str, device_type: str):
    allowed = options(field, device_type)

    def parse(raw):
        value = int(raw) if field == "accum" else raw
        if value not in allowed:
            raise ValueError(raw)
        return value
    return parse


def _task(ch: dict, device_type: str) -> None:
    base = ch["base"]
    st.markdown(t("ex2.task", layers=base["layers"], width=base["width"], batch=base["batch"],
                  budget=fmt_bytes(ch["budget"])))
    if ch["scaled"]:
        st.info(t("ex2.scaled", share=f"{ch['share'] * 100:.1f}", gpu_peak=fmt_bytes(ch["gpu_peak"]),
                  cpu_peak=fmt_bytes(ch["cpu_peak"]), budget=fmt_bytes(ch["budget"]), gpu_batch=GPU_BASE["batch"],
                  gpu_layers=GPU_BASE["layers"], gpu_width=GPU_BASE["width"], gpu_budget=fmt_bytes(GPU_BUDGET)),
                icon=":material/straighten:")


def render(meta: dict) -> None:
    slot = st.empty()
    device_type, rates = _device()
    try:
        ch = _challenge(device_type)
    except Exception as exc:  # noqa: BLE001 - an estimate failure is a message, not a broken page
        st.error(t("error.engine", message=f"{type(exc).__name__}: {exc}"))
        return
    future = search(ch, device_type, rates)
    with st.container(border=True):
        st.subheader(t("ex2.title"))
        _task(ch, device_type)
        choice = {}
        cols = st.columns(2) + st.columns(2)
        for i, field in enumerate(CHOICE_FIELDS):
            k = f"{NS}_{field}"
            allowed = list(options(field, device_type))
            urlstate.init(k, allowed[0], _parser(field, device_type))
            if st.session_state[k] not in allowed:  # a link made on a GPU opened on a CPU
                st.session_state[k] = allowed[0]
            labels = {v: t(f"opt.{field}.{v}", default=str(v)) for v in allowed}
            choice[field] = cols[i].selectbox(t("field." + field), allowed, format_func=labels.__getitem__, key=k)
            urlstate.sync(k, choice[field], allowed[0])
        est = estimate(config_of(ch["base"], choice), device_type)
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
        _show(done)
    grading_view.show_progress(LESSON, slot)


def _submit(ch: dict, choice: dict, best: dict) -> None:
    base, roles = ch["base"], ["baseline", "candidate"]
    specs = [{"label": t("ex2.label.baseline"), "kind": "run", "params": _valid(base).to_dict()},
             {"label": t("ex2.label.candidate"), "kind": "run", "params": _valid(config_of(base, choice)).to_dict()}]
    if best["choice"] and best["choice"] != choice:
        roles.append("best")
        specs.append({"label": t("ex2.label.best"), "kind": "run",
                      "params": _valid(config_of(base, best["choice"])).to_dict()})
    roles.append("guard")
    specs.append({"label": t("ex2.label.guard"), "kind": "guard", "params": specs[1]["params"]})
    jobs.start(NS, specs, tag={"roles": roles, "choice": choice, "best": best, "budget": ch["budget"]})


def _show(done: dict) -> None:
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
    a = assess(got["candidate"], got.get("baseline"), best_result, got.get("guard"), tag["budget"])
    grading_view.record(LESSON, a["passed"])
    st.divider()
    st.subheader(t("ex2.score", score=a["score"]))
    results.device_label(got["candidate"])
    guard = got.get("guard") or {}
    peak = fmt_bytes(a["peak"])
    grading_view.check_line(a["checks"]["fit"], t("ex2.check.fit" if a["checks"]["fit"] else "ex2.check.no_fit",
                                                  peak=peak, budget=fmt_bytes(tag["budget"])))
    grading_view.check_line(a["checks"]["correct"], t(
        "ex2.check.correct" if a["checks"]["correct"] else "ex2.check.wrong",
        rel=f"{guard.get('max_rel_diff', float('nan')):.2e}", tol=f"{guard.get('tolerance', float('nan')):.0e}"))
    grading_view.check_line(a["checks"]["fast"], t("ex2.check.fast" if a["checks"]["fast"] else "ex2.check.slow",
                                                   pct=f"{SPEED_SLACK * 100:.0f}"))
    if a["why"]:
        st.markdown(grading_view.say_all(a["why"]))
    if a["ms"] and a["best_ms"] and a["ms"] < a["best_ms"] / (1 + SPEED_SLACK):
        st.info(t("ex2.beat", ms=f"{a['ms']:,.2f}", best_ms=f"{a['best_ms']:,.2f}"))
    best = tag["best"]
    if best["choice"]:
        st.caption(t("ex2.best_known." + best["ranked_by"], choice=choice_text(best["choice"]), fitting=best["fitting"],
                     considered=best["considered"], peak=fmt_bytes(best["peak_bytes"])))
    else:
        st.warning(t("ex2.none_fits", considered=best["considered"], lowest=fmt_bytes(best["lowest_peak"])))
    lines = []
    for role, label in (("baseline", t("ex2.label.baseline")), ("candidate", t("ex2.label.candidate")),
                        ("best", t("ex2.label.best"))):
        r = got.get(role) if role != "best" else best_result
        if r is None:
            continue
        net = backend.net_peak(r)
        step = (r.get("step_ms") or {}).get("median")
        fits = net is not None and net <= tag["budget"] and not r.get("oom")
        line = t("ex2.run_line", peak=fmt_bytes(net), fits=":green[✓]" if fits else ":red[✗]",
                 ms=f"{step:,.2f}" if step is not None else "—")
        lines.append("- " + t("ex2.run_item", label=label, choice=choice_text(_choice_of(r)), line=line))
    st.markdown("\n".join(lines))


def _choice_of(result: dict) -> dict:
    config = result.get("config") or {}
    return {f: config.get(f) for f in CHOICE_FIELDS}
