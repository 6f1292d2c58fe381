"""Which job runs next: the class queue's fairness and its multi-GPU rule, as pure functions of the queue and the lanes
(no threads, no processes: the worker client calls them under its lock).

Fair: the next job comes from the session served least recently, so one learner's burst does not hold the class;
a session's own jobs keep their order. A job that needs several GPUs (a multi-GPU run) starts on lane 0 when every
lane it uses is idle, and no lane it uses takes a smaller job ahead of it meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterable

CLASS_WINDOW_S = 60.0  # another session served this recently: the server is a class's, not one learner's


def fair_order(pending: list[str], jobs: dict[str, dict], served: dict[str, float]) -> list[str]:
    """`pending` job ids in the order they should run: sessions served least recently first (a job without a session,
    from the CLI, counts as never served), each session's jobs by submission (`seq`). `served`: session -> when its
    last job started."""

    def rank(job_id: str) -> tuple[float, int]:
        job = jobs[job_id]
        return (served.get(job["owner"], 0.0) if job["owner"] else 0.0), job["seq"]

    return sorted(pending, key=rank)


def next_job(lane: int, idle: list[bool], candidates: Iterable[tuple[str, int]]) -> tuple[str, list[int]] | None:
    """The job lane `lane` runs next and the other lanes it holds while it runs, or None (this lane waits).

    `idle`: whether each lane is free; `candidates`: (job id, GPUs it needs) in fair order. A job is taken by the
    first lane that can run it; a multi-GPU job at the head of the queue keeps the lanes it needs from taking
    anything else until all of them are free."""
    for job_id, devices in candidates:
        need = min(devices, len(idle))
        if need <= 1:
            return job_id, []
        if lane >= need:
            continue  # this GPU is not among the ones the multi-GPU job uses
        if lane == 0 and all(idle[:need]):
            return job_id, list(range(1, need))
        return None  # keep this GPU free for the multi-GPU job at the head of the queue
    return None


def may_start(owner: str | None, running: set, served: dict[str, float], now: float) -> bool:
    """Whether a session's estimate may start in a free estimate process. In a class a session runs one estimate at a
    time: one tab's expensive link (a 64-layer replay of 20 s) held both processes, and every other learner's
    estimate waited for it. A learner alone (no other session served within CLASS_WINDOW_S) uses every process: a
    page that asks for seven estimates at once gets them two at a time. `running`: the sessions running one now."""
    if owner is None or owner not in running:
        return True
    return not any(other != owner and now - when < CLASS_WINDOW_S for other, when in served.items())


class Presence:
    """Whether a browser session still waits for its jobs. A tab whose connection dropped counts as closed only
    after `grace_s` without it coming back: a two-second network blip must not cancel a learner's running run.
    Not thread-safe by itself: its callers hold their own lock."""

    def __init__(self, grace_s: float):
        self.grace_s = grace_s
        self._gone_since: dict[str, float] = {}

    def gone(self, owner: str, connected: bool, now: float) -> bool:
        if connected:
            self._gone_since.pop(owner, None)
            return False
        return now - self._gone_since.setdefault(owner, now) >= self.grace_s
