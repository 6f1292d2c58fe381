"""Groups of worker jobs per page: submit, poll from a fragment, keep the finished statuses."""

from __future__ import annotations

import time

import streamlit as st

from app import backend
from app.i18n import t
from app.ui.errors import engine_error

POLL_S = 0.7
# Each poll first waits this long for the group to end: a result is drawn the moment the worker reports it
# (it waited 0.2-0.8 s for the next poll), and the fragment still ends before the next one is due.
POLL_WAIT_S = 0.5
FAR_POLL_S = 2.0
FAR_POSITION = 3
TERMINAL = ("done", "error", "cancelled")
SUBMITTED = "jobs.submitted_this_run"  # the groups this page run submitted, for settle()


def _pending_key(ns: str) -> str:
    return f"{ns}.jobs"


def _done_key(ns: str) -> str:
    return f"{ns}.done"


def _previous_key(ns: str) -> str:
    return f"{ns}.previous"


def previous(ns: str) -> dict | None:
    """The group that finished before the last one, or None."""
    return st.session_state.get(_previous_key(ns))


def submit(ns: str, specs: list[dict], tag=None) -> str | None:
    """specs: [{"label", "kind", "params"}]; returns an error message or None. tag travels to the result."""
    ids, failed = backend.submit(specs)
    if failed:
        if failed.type == "QueueFull":
            return t("jobs.session_full" if failed.code == "per_session" else "jobs.queue_full")
        return failed.message
    st.session_state[_pending_key(ns)] = {"ids": ids, "specs": specs, "tag": tag, "since": time.time(), "new": True}
    st.session_state.setdefault(SUBMITTED, []).append(ns)
    return None


def start(ns: str, specs: list[dict], tag=None) -> None:
    """Submit; the page's `poll(ns)`, which every page calls after its Run button, shows the progress in this
    same run (no second page run per click). A refused submission is shown here; a click that arrives while
    the page's group still runs (the button is redrawn disabled only with the result) is ignored."""
    if pending(ns):
        return
    error = submit(ns, specs, tag=tag)
    if error:
        engine_error(error)


def panel(ns: str, label: str, specs, *, tag=None, disabled=False, primary=True, explain=True, key: str | None = None):
    """A page's Run button, its worker jobs and their result, read top to bottom: a click submits `specs` (job specs:
    label, kind, params), the progress shows in this page run, and the last finished group comes back (None before
    one), with a word where the worker's cache answered unless `explain` is off (the caller draws it elsewhere).
    `specs` may be a function, called at the click, that returns (specs, tag) or None where it refuses (an exercise
    checks the learner's answers first, and says what to fix where the button is). A page whose button and result
    sit apart calls the two halves, `run_button` and `outcome`, where each belongs."""
    run_button(ns, label, specs, tag=tag, disabled=disabled, primary=primary, key=key)
    return outcome(ns, explain=explain)


def run_button(ns: str, label: str, specs, *, tag=None, disabled=False, primary=True, key: str | None = None) -> None:
    """The Run button of `panel`: disabled while the page's group runs; a click submits the group."""
    kind = "primary" if primary else "secondary"
    if st.button(label, key=key or f"{ns}.run", type=kind, disabled=disabled or pending(ns), width="stretch"):
        group = specs() if callable(specs) else (specs, tag)
        if group is not None:
            start(ns, group[0], tag=group[1])


def outcome(ns: str, explain: bool = True) -> dict | None:
    """The progress and the result of `panel`: the group's progress while it runs, then its last finished group."""
    poll(ns)
    done = finished(ns)
    if done and explain:
        explain_cached(done)
    return done


def pending(ns: str) -> bool:
    return _pending_key(ns) in st.session_state


def finished(ns: str) -> dict | None:
    """{"specs", "statuses", "tag"} of the last completed group, or None."""
    return st.session_state.get(_done_key(ns))


def explain_cached(done: dict) -> None:
    """Says when a result came from the worker's cache (the same experiment already ran on this server): a result
    that appears at once, or a timing from an earlier moment, must not look like a run just made."""
    cached = sum(1 for s in done.get("statuses") or [] if s.get("cached"))
    total = len(done.get("statuses") or [])
    if cached and total == 1:
        st.caption(t("result.cached"))
    elif cached:
        st.caption(t("result.cached_some", n=cached, total=total))


def clear(ns: str) -> None:
    st.session_state.pop(_done_key(ns), None)


def _cancel(ns: str) -> None:
    group = st.session_state.get(_pending_key(ns))
    if group:
        backend.cancel(group["ids"])


def poll(ns: str) -> None:
    """Shows progress of the page's running group; while it runs, a fragment polls it and reruns the page when it
    ends. A group submitted in this run that already ended (the worker's cache answered) is stored at once: the
    page, which reads `finished` after this and drew its Run button before submitting, draws the result in this
    run, with no second run. With nothing pending an empty container takes the fragment's place: the elements
    below keep their places in the page, and the browser keeps their charts instead of building them again."""
    if pending(ns):
        group = st.session_state[_pending_key(ns)]
        submitted_now = group.pop("new", False)
        if _store_if_ended(ns, group) is not None:
            group["in_page_run"] = True  # the fragment's body runs within this page run: it must not wait there
            st.fragment(_poll_body, run_every=FAR_POLL_S if _far(group) else POLL_S)(ns)
            return
        if not submitted_now:
            st.rerun()  # this run drew the page (its Run button disabled) while the group was pending
    st.container()


def _far(group: dict) -> bool:
    """Far back in the queue nothing changes quickly: fewer polls, and none waits, leave the server to the pages."""
    return (group.get("last_position") or 0) > FAR_POSITION


def settle() -> None:
    """At the end of a page run that submitted a group (app/main.py, after the page is drawn): wait up to
    POLL_WAIT_S for it to end, and if it did, run the page again at once with its result. A short job's result
    then comes when the worker reports it, not with the fragment's first poll, 0.7 s after the page run."""
    submitted = [ns for ns in st.session_state.pop(SUBMITTED, []) if pending(ns)]
    ids = [job_id for ns in submitted for job_id in st.session_state[_pending_key(ns)]["ids"]]
    if ids and backend.wait_ended(ids, POLL_WAIT_S):
        for ns in submitted:
            _store_if_ended(ns, st.session_state[_pending_key(ns)])
        st.rerun()


def _store_if_ended(ns: str, group: dict) -> list[dict] | None:
    """None once every job of the group ended (they are stored as the page's finished group), else their statuses."""
    statuses = [backend.status(job_id, result=False) for job_id in group["ids"]]
    group["last_position"] = min((s.get("position") or 0 for s in statuses), default=0)
    if not all(s.get("state") in TERMINAL for s in statuses):
        return statuses
    statuses = [backend.status(job_id) for job_id in group["ids"]]  # the results, read once
    if _done_key(ns) in st.session_state:
        # The run before is what a "try this" prompt's prediction is checked against.
        st.session_state[_previous_key(ns)] = st.session_state[_done_key(ns)]
    st.session_state[_done_key(ns)] = {"specs": group["specs"], "statuses": statuses, "tag": group["tag"]}
    del st.session_state[_pending_key(ns)]
    return None


def _poll_body(ns: str) -> None:
    group = st.session_state.get(_pending_key(ns))
    if not group:
        return
    if not group.pop("in_page_run", False) and not _far(group):
        backend.wait_ended(group["ids"], POLL_WAIT_S)
    statuses = _store_if_ended(ns, group)
    if statuses is None:
        st.rerun()
    _render_progress(ns, group, statuses)


def _render_progress(ns: str, group: dict, statuses: list[dict]) -> None:
    running = any(s.get("state") == "running" for s in statuses)
    label = t("jobs.running") if running else t("jobs.queued")
    with st.status(label, state="running", expanded=True):
        for spec, status in zip(group["specs"], statuses, strict=True):
            state = status.get("state", "queued")
            line = f"**{spec['label']}** — {t('jobs.state.' + state)}"
            if state == "queued" and status.get("position"):
                line += " · " + t("jobs.position", n=status["position"])
            st.markdown(line)
            if state == "running" and status.get("retried"):
                st.caption(t("jobs.retried"))
            progress = status.get("progress")
            if state == "running" and progress and progress.get("total"):
                fraction = min(1.0, max(0.0, progress["done"] / progress["total"]))
                # The engine's label is English; the counts say the same in every language.
                st.progress(fraction, text=t("jobs.progress", done=progress["done"], total=progress["total"]))
        st.caption(t("jobs.elapsed", s=int(time.time() - group["since"])))
    st.button(t("jobs.cancel"), key=f"{ns}.cancel", on_click=_cancel, args=(ns,))
