"""The worker client: one lane per GPU (experiments/jobs/lanes.py), each running jobs one at a time, shared by every
browser session; the queue's order is experiments/jobs/policy.py's.

Why one at a time: torch.cuda peak statistics are per process and device, and a classroom's GPU is shared.
Identical jobs are run once: a queued or running twin is joined, a finished one is served from the cache, so thirty
students pressing Run on the same preset cost one run. A failed job's status carries its error as data
(experiments/jobs/errors.py).
"""

from __future__ import annotations

import itertools
import os
import pickle
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from ..core.limits import load as load_limits
from ..core.units import MIB
from . import errors, policy
from .admission import cacheable, check_params, devices_needed, job_key
from .errors import QueueFull
from .lanes import InlineLane, Lane, ProcessLane

LIMITS = load_limits()
UNDER_WAY = {"queued", "running"}
CACHE_SIZE = 256
CACHE_BYTES = 256 * MIB  # results kept for the next learner, all together (a run with its timeline: ~1 MB)
TAB_GRACE_S = 15.0  # a tab disconnected this long counts as closed (its jobs dropped); a shorter blip does not
JOB_TTL_S = 600.0  # how long a finished job's status waits for its page; results stay in the bounded cache
CLOSED = "cancelled: the page that asked for it was closed"

_shared: WorkerClient | None = None
_shared_lock = threading.Lock()

__all__ = ["QueueFull", "WorkerClient", "devices_needed", "job_key", "shared_client"]


def _pickled(result) -> bytes | None:
    try:
        return pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - such a result is kept as the object, and not cached
        return None


def shared_client() -> WorkerClient:
    """The server's one worker client. A module global, not st.cache_resource: a visitor's "Clear cache"
    must not drop it (that failed every running job and started a second worker on the same GPU)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = WorkerClient()
        return _shared


class WorkerClient:
    """Thread-safe: Streamlit sessions call submit/status/cancel from their own threads.

    One lane per GPU (one worker process each); a job goes to whichever lane is free. The queue is fair
    (policy.fair_order), and each session may have only `max_queue_per_session` jobs waiting. A job whose every
    submitter's session has gone (a closed tab) is dropped from the queue, or stopped if it runs.
    `rates`: whether the worker processes measure their device's rates (the page's time predictions; seconds to
    tens of seconds per process on a busy CPU).
    """

    def __init__(self, inline: bool | None = None, rates: bool = True, spare: bool | None = None):
        self.inline = os.environ.get("GPU_MEMORY_LAB_INLINE") == "1" if inline is None else inline
        self.rates = rates
        self.spare = spare  # a spare worker per GPU (None: a classroom's default, lanes.ProcessLane)
        self.lock = threading.Condition()
        self._jobs: dict[str, dict] = {}
        self._pending: list[str] = []
        self._by_key: dict[str, str] = {}
        self._cache: OrderedDict[str, bytes] = OrderedDict()  # key -> the result, pickled
        self._cache_sizes: dict[str, int] = {}
        # A random prefix: ids never repeat, not even across a restarted server.
        self._ids = (f"j{secrets.token_hex(3)}-{n}" for n in itertools.count(1))
        self._seq = itertools.count()
        # One ticket per submission; joined submissions share a job, which is cancelled with its last ticket.
        self._tickets: dict[str, str] = {}
        self._owners: dict[str, str | None] = {}  # ticket -> the browser session that submitted it
        self._served: dict[str, float] = {}  # session -> when its last job started
        self._finished_at: OrderedDict[str, float] = OrderedDict()
        # Set by the app: tells whether a browser session is still connected.
        self.owner_alive: Callable[[str], bool] | None = None
        self._presence = policy.Presence(TAB_GRACE_S)
        self._lanes: list[Lane] = []
        self.add_lane()

    # -- public API -------------------------------------------------------------------------
    def submit(self, kind: str, params: dict, owner: str | None = None, fresh: bool = False) -> str:
        """`fresh`: never the cached result of an earlier run (a timing that decides a grade is measured now)."""
        check_params(params)
        key = job_key(kind, params)
        with self.lock:
            self._expire()
            job_id = next(self._ids)
            if key in self._cache and not fresh:
                self._cache.move_to_end(key)
                self._jobs[job_id] = self._new(kind, params, key, owner, state="done", cached=True)
                self._jobs[job_id]["blob"] = self._cache[key]
                self._finished_at[job_id] = time.monotonic()
                return self._ticket(job_id, job_id, owner)
            twin = self._by_key.get(key)
            if twin and self._jobs[twin]["state"] in ("queued", "running"):
                return self._ticket(twin, job_id, owner)
            if len(self._pending) >= LIMITS.max_queue:
                raise QueueFull(
                    f"the queue is full ({LIMITS.max_queue} jobs wait already); try again in a minute",
                    limit=LIMITS.max_queue,
                )
            mine = sum(1 for j in self._pending if self._jobs[j]["owner"] == owner) if owner else 0
            if mine >= LIMITS.max_queue_per_session:
                raise QueueFull(
                    f"this session has {mine} jobs waiting already (max_queue_per_session); wait for one to finish",
                    per_session=True,
                    limit=LIMITS.max_queue_per_session,
                )
            self._jobs[job_id] = self._new(kind, params, key, owner)
            self._ticket(job_id, job_id, owner)
            self._by_key[key] = job_id
            self._pending.append(job_id)
            self.lock.notify_all()
            return job_id

    def status(self, ticket: str, result: bool = True) -> dict:
        """{"state", "position", "progress", "result", "error", "error_info", "cached", "retried"} ("retried": the
        job runs again because its worker died); `result=False`: without the result (a page polling a group of jobs
        reads the results once, when all have ended)."""
        with self.lock:
            job_id = self._tickets.get(ticket, ticket)
            job = self._jobs.get(job_id)
            if job is None:
                return {
                    "state": "error",
                    "position": 0,
                    "progress": None,
                    "result": None,
                    "error": "unknown job",
                    "error_info": errors.unknown_job(),
                }
            position = 0
            if job_id in self._pending:
                busy = any(not lane.idle for lane in self._lanes)
                position = self._order().index(job_id) + (1 if busy else 0)
            out = {k: job[k] for k in ("state", "progress", "result", "error", "error_info", "cached")}
            out["retried"] = bool(job.get("retried"))
            blob = job.get("blob")
        # Results are held pickled (a few times smaller than the objects, shared by the cache and every job that
        # got it) and read here, outside the lock, for the page that asks.
        if not result:
            return out | {"position": position, "result": None}
        return out | {"position": position, "result": pickle.loads(blob) if blob is not None else out["result"]}

    def wait_ended(self, tickets: list[str], timeout: float) -> bool:
        """True once every one of these jobs has ended (an unknown one counts), False after `timeout` seconds."""
        with self.lock:
            states = lambda: [self._jobs.get(self._tickets.get(t, t), {}).get("state") for t in tickets]  # noqa: E731
            return self.lock.wait_for(lambda: not UNDER_WAY & set(states()), timeout)

    def cancel(self, ticket: str) -> None:
        """Withdraws one submission; the job stops only when no other learner still waits for it."""
        with self.lock:
            job_id = self._tickets.get(ticket, ticket)
            job = self._jobs.get(job_id)
            if job is None:
                return
            job["subscribers"].discard(ticket)
            if not job["subscribers"]:
                self._stop(job_id)

    def device_info(self, timeout: float = 60.0) -> dict | None:
        """Lane 0's device (name, total and free memory, refreshed after every job), with every device in "devices"."""
        if self.inline:
            from ..measure.device import device_info

            info = device_info()
            return info | {"devices": [info]}
        lane = self._lanes[0]
        lane.ensure_process()
        lane.ready.wait(timeout)
        if lane.device is None:
            return None
        return lane.device | {"devices": [ln.device for ln in list(self._lanes) if ln.device]}

    def queue_length(self) -> int:
        with self.lock:
            return len(self._pending) + sum(1 for lane in self._lanes if lane.running)

    @property
    def _proc(self):  # lane 0's worker process (tests kill it)
        return self._lanes[0].proc

    # -- what the lanes call ------------------------------------------------------------------
    def finish(self, job_id: str, state: str, result=None, error=None, error_info=None, blob=None, flags=None) -> None:
        """`result` (an object), or `blob`: the result pickled, with `flags` {"cancelled", "cacheable"} read off it
        where it was made (a worker process), so that the server never unpickles a result nobody reads."""
        if state == "done" and blob is None:
            blob = _pickled(result)
            flags = {
                "cancelled": bool(isinstance(result, dict) and result.get("cancelled")),
                "cacheable": cacheable(result),
            }
            if blob is not None:
                result = None
        flags = flags or {}
        with self.lock:
            job = self._jobs[job_id]
            if state == "done" and flags.get("cancelled"):
                state = "cancelled"
            if state == "cancelled" and error_info is None:
                error_info = errors.cancelled()
            job.update(state=state, result=result, error=error, error_info=error_info, blob=blob)
            self._finished_at[job_id] = time.monotonic()
            for lane in self._lanes:
                if lane.running == job_id:
                    lane.running = None
                if lane.held_by == job_id:
                    lane.held_by = None
            if state == "done" and blob is not None and flags.get("cacheable"):
                self._remember(job["key"], blob)
            if self._by_key.get(job["key"]) == job_id:
                del self._by_key[job["key"]]
            self.lock.notify_all()

    def watch(self, lane: Lane, job_id: str) -> None:
        """Stops a running job nobody waits for any more (its pages were closed), and drops such queued jobs."""
        with self.lock:
            for queued in list(self._pending):
                if self._presence_of(queued) == "gone":
                    self._stop(queued, CLOSED)
            if self._abandoned(job_id) and lane.cancel is not None and not lane.cancel.is_set():
                self._unjoinable(job_id)
                lane.cancel.set()

    def set_device(self, lane: Lane, info: dict) -> None:
        lane.device = info
        lane.ready.set()
        if lane.index == 0 and not self.inline:
            # One worker per GPU: the others start now, so every device is on the home page before any job.
            while len(self._lanes) < int(info.get("device_count") or 1):
                self.add_lane().ensure_process()

    def add_lane(self) -> Lane:
        index = len(self._lanes)
        lane = InlineLane(index) if self.inline else ProcessLane(index, LIMITS.max_job_seconds, self.rates, self.spare)
        self._lanes.append(lane)
        threading.Thread(
            target=self._dispatch_loop, args=(lane,), name=f"gml-dispatch-{lane.index}", daemon=True
        ).start()
        return lane

    # -- internals ----------------------------------------------------------------------------
    def _new(self, kind, params, key, owner, state="queued", result=None, cached=False) -> dict:
        return {
            "kind": kind,
            "params": params,
            "key": key,
            "state": state,
            "progress": None,
            "owner": owner,
            "result": result,
            "error": None,
            "error_info": None,
            "cached": cached,
            "subscribers": set(),
            "tickets": [],
            "seq": next(self._seq),
            "devices": devices_needed(kind, params),
        }

    def _ticket(self, job_id: str, ticket: str, owner: str | None) -> str:
        self._tickets[ticket] = job_id
        self._owners[ticket] = owner
        self._jobs[job_id]["subscribers"].add(ticket)
        self._jobs[job_id]["tickets"].append(ticket)
        return ticket

    def _order(self) -> list[str]:
        return policy.fair_order(self._pending, self._jobs, self._served)

    def _abandoned(self, job_id: str) -> bool:
        """Every session that waits for this job has gone (closed tabs); jobs from the CLI never are."""
        return self._presence_of(job_id) == "gone"

    def _presence_of(self, job_id: str) -> str:
        """ "here"; "away": every tab that waits for it is disconnected, for less than TAB_GRACE_S (a queued job
        does not start then, a running one goes on); "gone": for longer."""
        alive = self.owner_alive
        job = self._jobs.get(job_id)
        if alive is None or job is None:
            return "here"
        owners = {self._owners.get(t) for t in job["subscribers"]}
        if not owners or None in owners:
            return "here"
        self._presence.grace_s = TAB_GRACE_S
        try:
            connected = {o: bool(alive(o)) for o in owners}
        except Exception:  # noqa: BLE001 - when in doubt the job is still wanted
            return "here"
        now = time.monotonic()
        gone = [self._presence.gone(o, c, now) for o, c in connected.items()]
        return "here" if any(connected.values()) else "gone" if all(gone) else "away"

    def _stop(self, job_id: str, reason: str | None = None) -> None:
        job = self._jobs[job_id]
        if job_id in self._pending:
            self._pending.remove(job_id)
            job.update(state="cancelled", error=reason, error_info=errors.cancelled(abandoned=reason is not None))
            self._finished_at[job_id] = time.monotonic()
            if self._by_key.get(job["key"]) == job_id:
                del self._by_key[job["key"]]
        elif job["state"] == "running":
            self._unjoinable(job_id)
            for lane in self._lanes:
                if lane.running == job_id and lane.cancel is not None:
                    lane.cancel.set()

    def _unjoinable(self, job_id: str) -> None:
        """A job being stopped takes no new learner: one who presses Run just after another's Cancel of the same
        configuration gets a run of their own (queued behind it), not the cancelled one."""
        key = self._jobs[job_id]["key"]
        if self._by_key.get(key) == job_id:
            del self._by_key[key]

    def _remember(self, key: str, blob: bytes) -> None:
        """The result cache, bounded by count and by bytes (a distributed result with its ranks' timelines is
        megabytes: a count alone let it grow to gigabytes)."""
        if len(blob) > CACHE_BYTES:
            return
        self._cache[key] = blob
        self._cache.move_to_end(key)
        self._cache_sizes[key] = len(blob)
        while len(self._cache) > CACHE_SIZE or sum(self._cache_sizes.values()) > CACHE_BYTES:
            old, _ = self._cache.popitem(last=False)
            self._cache_sizes.pop(old, None)

    def cache_bytes(self) -> int:
        with self.lock:
            return sum(self._cache_sizes.values())

    def _expire(self) -> None:
        """Finished jobs are kept JOB_TTL_S for their pages to collect, then dropped: the table stays bounded."""
        cutoff = time.monotonic() - JOB_TTL_S
        while self._finished_at and next(iter(self._finished_at.values())) < cutoff:
            job_id, _ = self._finished_at.popitem(last=False)
            job = self._jobs.pop(job_id, None)
            for ticket in (job or {}).get("tickets", ()):
                self._tickets.pop(ticket, None)
                self._owners.pop(ticket, None)

    def _candidates(self):
        """The queue in fair order, as the policy reads it; an abandoned job met on the way is dropped."""
        for job_id in self._order():
            presence = self._presence_of(job_id)
            if presence == "gone":
                self._stop(job_id, CLOSED)
            if presence != "here":
                continue
            yield job_id, self._jobs[job_id]["devices"]

    def _take(self, lane: Lane) -> str | None:
        """The job this lane runs next, or None. Called under the lock."""
        if not lane.idle or not lane.takes_jobs():
            return None
        chosen = policy.next_job(lane.index, [ln.idle for ln in self._lanes], self._candidates())
        if chosen is None:
            return None
        job_id, held = chosen
        for i in held:
            self._lanes[i].held_by = job_id
        return job_id

    def _dispatch_loop(self, lane: Lane) -> None:
        while True:
            with self.lock:
                while True:
                    lane.tend(self, bool(self._pending))
                    job_id = self._take(lane)
                    if job_id is not None:
                        break
                    self.lock.wait(timeout=0.5)
                self._pending.remove(job_id)
                job = self._jobs[job_id]
                if job["owner"]:
                    self._served[job["owner"]] = time.monotonic()
                # Reset the cancel flag before the job counts as running, under the lock `cancel` takes:
                # a Cancel from the moment it is running reaches it, even before the worker starts it.
                lane.arm()
                job["state"] = "running"
                lane.running = job_id
            try:
                lane.run(self, job_id, job)
            except Exception as e:  # noqa: BLE001 - the dispatcher must outlive any one job
                self.finish(job_id, "error", error=errors.message(e), error_info=errors.describe(e))
