"""One worker process per GPU, each running jobs one at a time, shared by every browser session.

Why a process: torch.cuda peak statistics are per process and device, so two sessions measuring
in threads of the web server would corrupt each other's peaks. Why one at a time: the same, and a
classroom's GPU is shared. Why spawn: CUDA cannot be re-initialised in a forked child.
Identical jobs are run once: a queued or running twin is joined, a finished one is served from
the cache, so thirty students pressing Run on the same preset cost one run.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import multiprocessing as mp
import os
import pickle
import queue
import secrets
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from ..core.limits import load as load_limits

LIMITS = load_limits()
MAX_JOB_SECONDS = LIMITS.max_job_seconds


class QueueFull(RuntimeError):
    def __init__(self, message: str, per_session: bool = False):
        super().__init__(message)
        self.per_session = per_session


CACHE_SIZE = 256
PROGRESS_KINDS = ("run", "timing_rounds", "distributed")  # jobs that report progress as they go
ABANDON_CHECK_S = 2.0  # how often a running job checks that someone still waits for it
JOB_TTL_S = 600.0  # how long a finished job's status waits for its page; results stay in the bounded cache

_shared: WorkerClient | None = None
_shared_device = False  # in the worker: another lab server's worker holds this GPU
_shared_lock = threading.Lock()


def shared_client() -> WorkerClient:
    """The server's one worker client. A module global, not st.cache_resource: a visitor's "Clear cache"
    must not drop it (that failed every running job and started a second worker on the same GPU)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = WorkerClient()
        return _shared


def _report_device(events, rates: bool = True) -> None:
    from ..estimate.calibration import calibrated_report
    from ..measure.device import device_info

    try:
        info = device_info(rates=False)
        info |= (calibrated_report(info["type"]) if rates else {}) | {"shared_with_another_server": _shared_device}
        if info["type"] == "cuda":
            import torch

            info["device_count"] = torch.cuda.device_count()  # the client starts one worker per GPU
        events.put(("device", None, info))
    except Exception as e:  # noqa: BLE001 - no device info is a message, not a dead worker
        events.put(("device", None, {"type": "unknown", "error": f"{type(e).__name__}: {e}"}))


def _exit_with_parent(parent_pid: int) -> None:
    """A worker whose server died (even by SIGKILL) exits too, giving back its memory and its GPU."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent_pid:
            os._exit(0)


_device_lock = None


def _claim_device() -> bool:
    """One lab worker per GPU: a second server on the same machine would share the device and spoil both
    servers' measurements. Returns False when another worker holds the device's lock file."""
    global _device_lock
    import fcntl
    import tempfile

    import torch

    if not torch.cuda.is_available():
        return True
    path = os.path.join(tempfile.gettempdir(), f"gpu-memory-lab-cuda{torch.cuda.current_device()}.lock")
    _device_lock = open(path, "a")  # noqa: SIM115 - held for the life of the worker
    try:
        fcntl.flock(_device_lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False


def _worker_main(jobs, events, cancel, parent_pid: int | None = None, device_index: int | None = None) -> None:
    from .kinds import execute

    global _shared_device
    if device_index is not None:
        import torch

        torch.cuda.set_device(device_index)  # before anything creates a context: this worker's one GPU
    _shared_device = not _claim_device()

    if parent_pid is not None:
        threading.Thread(target=_exit_with_parent, args=(parent_pid,), name="gml-parent-watch", daemon=True).start()

    # The web server asks the worker for the device view, so that only this process ever
    # creates a CUDA context (each context costs hundreds of MiB of GPU memory). First without the
    # device's measured rates (seconds on a busy CPU), so the first page does not wait for them.
    _report_device(events, rates=False)
    _report_device(events)
    while True:
        item = jobs.get()
        if item is None:
            return
        job_id, kind, params = item
        # The client clears `cancel` before it sends a job: a Cancel that arrives before this point still counts.
        events.put(("running", job_id, None))

        def progress(done, total, label, job_id=job_id):
            events.put(("progress", job_id, {"done": done, "total": total, "label": label}))

        try:
            result = execute(kind, params, progress=progress if kind in PROGRESS_KINDS else None, should_cancel=cancel.is_set)
            events.put(("done", job_id, _result_file(result)))
        except Exception as e:  # noqa: BLE001 - every failure is reported to the page, never raised there
            events.put(("error", job_id, f"{type(e).__name__}: {e}"[:2000]))
        _report_device(events)


def _result_file(result) -> dict:
    """A result travels through a file, and the pipe carries only its name. A worker killed while writing a
    long message to the pipe leaves half a message that blocks the server's reader forever (a run's result
    with its timeline is hundreds of KB); a message under PIPE_BUF bytes is written whole or not at all."""
    fd, path = tempfile.mkstemp(prefix="gpu-memory-lab-result-", suffix=".pickle")
    with os.fdopen(fd, "wb") as f:
        pickle.dump(result, f, protocol=pickle.HIGHEST_PROTOCOL)
    return {"result_file": path}


def _read_result(payload):
    if isinstance(payload, dict) and set(payload) == {"result_file"}:
        path = payload["result_file"]
        try:
            with open(path, "rb") as f:
                return pickle.load(f)
        finally:
            with contextlib.suppress(OSError):
                os.remove(path)
    return payload


def _key(kind: str, params: dict) -> str:
    return kind + ":" + json.dumps(params, sort_keys=True, default=str)



def _devices_needed(kind: str, params: dict) -> int:
    """A multi-GPU job holds every GPU its ranks use; every other job holds one."""
    if kind != "distributed" or str(params.get("device", "auto")) == "cpu":
        return 1
    try:
        return max(1, int(params.get("world_size", 2)))  # DistributedConfig's default
    except (TypeError, ValueError):
        return 1


class _Lane:
    """One device and the worker process that owns it (in inline mode, the server process itself)."""

    def __init__(self, index: int):
        self.index = index
        self.proc = None
        self.jobs_q = self.events_q = None
        self.cancel = None
        self.running: str | None = None
        self.held_by: str | None = None  # a multi-GPU job started on lane 0 uses this device too
        self.device: dict | None = None
        self.ready = threading.Event()
        self.proc_lock = threading.Lock()

    @property
    def idle(self) -> bool:
        return self.running is None and self.held_by is None


class WorkerClient:
    """Thread-safe: Streamlit sessions call submit/status/cancel from their own threads.

    One lane per GPU (one worker process each); a job goes to whichever lane is free. The queue is fair:
    the next job comes from the session served least recently, so one learner's burst does not hold the
    class, and each session may have only `max_queue_per_session` jobs waiting. A job whose every
    submitter's session has gone (a closed tab) is dropped from the queue, or stopped if it runs.
    """

    def __init__(self, inline: bool | None = None):
        self.inline = os.environ.get("GPU_MEMORY_LAB_INLINE") == "1" if inline is None else inline
        self._lock = threading.Condition()
        self._jobs: dict[str, dict] = {}
        self._pending: list[str] = []
        self._by_key: dict[str, str] = {}
        self._cache: OrderedDict[str, dict] = OrderedDict()
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
        self._lanes: list[_Lane] = []
        self._add_lane()

    # -- public API -------------------------------------------------------------------------
    def submit(self, kind: str, params: dict, owner: str | None = None) -> str:
        key = _key(kind, params)
        with self._lock:
            self._expire()
            job_id = next(self._ids)
            if key in self._cache:
                self._cache.move_to_end(key)
                self._jobs[job_id] = self._new(kind, params, key, owner, state="done", result=self._cache[key],
                                               cached=True)
                self._finished_at[job_id] = time.monotonic()
                return self._ticket(job_id, job_id, owner)
            twin = self._by_key.get(key)
            if twin and self._jobs[twin]["state"] in ("queued", "running"):
                return self._ticket(twin, job_id, owner)
            if len(self._pending) >= LIMITS.max_queue:
                raise QueueFull(f"the queue is full ({LIMITS.max_queue} jobs wait already); try again in a minute")
            mine = sum(1 for j in self._pending if self._jobs[j]["owner"] == owner) if owner else 0
            if mine >= LIMITS.max_queue_per_session:
                raise QueueFull(f"this session has {mine} jobs waiting already (max_queue_per_session); "
                                "wait for one to finish", per_session=True)
            self._jobs[job_id] = self._new(kind, params, key, owner)
            self._ticket(job_id, job_id, owner)
            self._by_key[key] = job_id
            self._pending.append(job_id)
            self._lock.notify_all()
            return job_id

    def status(self, ticket: str) -> dict:
        with self._lock:
            job_id = self._tickets.get(ticket, ticket)
            job = self._jobs.get(job_id)
            if job is None:
                return {"state": "error", "position": 0, "progress": None, "result": None, "error": "unknown job"}
            position = 0
            if job_id in self._pending:
                busy = any(not lane.idle for lane in self._lanes)
                position = self._order().index(job_id) + (1 if busy else 0)
            return {k: job[k] for k in ("state", "progress", "result", "error", "cached")} | {"position": position}

    def cancel(self, ticket: str) -> None:
        """Withdraws one submission; the job stops only when no other learner still waits for it."""
        with self._lock:
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
        self._ensure_process(lane)
        lane.ready.wait(timeout)
        if lane.device is None:
            return None
        return lane.device | {"devices": [ln.device for ln in list(self._lanes) if ln.device]}

    def queue_length(self) -> int:
        with self._lock:
            return len(self._pending) + sum(1 for lane in self._lanes if lane.running)

    @property
    def _proc(self):  # lane 0's worker process (tests kill it)
        return self._lanes[0].proc

    # -- internals ----------------------------------------------------------------------------
    def _new(self, kind, params, key, owner, state="queued", result=None, cached=False) -> dict:
        return {"kind": kind, "params": params, "key": key, "state": state, "progress": None, "owner": owner,
                "result": result, "error": None, "cached": cached, "subscribers": set(), "tickets": [],
                "seq": next(self._seq), "devices": _devices_needed(kind, params)}

    def _ticket(self, job_id: str, ticket: str, owner: str | None) -> str:
        self._tickets[ticket] = job_id
        self._owners[ticket] = owner
        self._jobs[job_id]["subscribers"].add(ticket)
        self._jobs[job_id]["tickets"].append(ticket)
        return ticket

    def _order(self) -> list[str]:
        """The fair queue: sessions served least recently first; each session's jobs in submission order."""
        def rank(job_id):
            job = self._jobs[job_id]
            return self._served.get(job["owner"], 0.0) if job["owner"] else 0.0, job["seq"]

        return sorted(self._pending, key=rank)

    def _abandoned(self, job_id: str) -> bool:
        """Every session that waits for this job has gone (closed tabs); jobs from the CLI never are."""
        alive = self.owner_alive
        job = self._jobs.get(job_id)
        if alive is None or job is None:
            return False
        owners = {self._owners.get(t) for t in job["subscribers"]}
        if not owners or None in owners:
            return False
        try:
            return not any(alive(o) for o in owners)
        except Exception:  # noqa: BLE001 - when in doubt the job is still wanted
            return False

    def _stop(self, job_id: str, reason: str | None = None) -> None:
        job = self._jobs[job_id]
        if job_id in self._pending:
            self._pending.remove(job_id)
            job.update(state="cancelled", error=reason)
            self._finished_at[job_id] = time.monotonic()
            if self._by_key.get(job["key"]) == job_id:
                del self._by_key[job["key"]]
        elif job["state"] == "running":
            for lane in self._lanes:
                if lane.running == job_id and lane.cancel is not None:
                    lane.cancel.set()

    def _expire(self) -> None:
        """Finished jobs are kept JOB_TTL_S for their pages to collect, then dropped: the table stays bounded."""
        cutoff = time.monotonic() - JOB_TTL_S
        while self._finished_at and next(iter(self._finished_at.values())) < cutoff:
            job_id, _ = self._finished_at.popitem(last=False)
            job = self._jobs.pop(job_id, None)
            for ticket in (job or {}).get("tickets", ()):
                self._tickets.pop(ticket, None)
                self._owners.pop(ticket, None)

    def _finish(self, job_id: str, state: str, result=None, error=None) -> None:
        with self._lock:
            job = self._jobs[job_id]
            if state == "done" and result is not None and result.get("cancelled"):
                state = "cancelled"
            job.update(state=state, result=result, error=error)
            self._finished_at[job_id] = time.monotonic()
            for lane in self._lanes:
                if lane.running == job_id:
                    lane.running = None
                if lane.held_by == job_id:
                    lane.held_by = None
            if state == "done":
                self._cache[job["key"]] = result
                while len(self._cache) > CACHE_SIZE:
                    self._cache.popitem(last=False)
            if self._by_key.get(job["key"]) == job_id:
                del self._by_key[job["key"]]
            self._lock.notify_all()

    def _take(self, lane: _Lane) -> str | None:
        """The job this lane runs next, or None. Called under the lock."""
        if not lane.idle or (not self.inline and lane.device is None):
            return None  # a lane takes jobs once its worker has reported its device
        for job_id in self._order():
            if self._abandoned(job_id):
                self._stop(job_id, "cancelled: the page that asked for it was closed")
                continue
            need = min(self._jobs[job_id]["devices"], len(self._lanes))
            if need == 1:
                return job_id
            if lane.index >= need:
                continue  # this GPU is not among the ones the multi-GPU job uses
            if lane.index == 0 and all(ln.idle for ln in self._lanes[:need]):
                for ln in self._lanes[1:need]:
                    ln.held_by = job_id
                return job_id
            return None  # keep this GPU free for the multi-GPU job at the head of the queue
        return None

    def _add_lane(self) -> _Lane:
        lane = _Lane(len(self._lanes))
        self._lanes.append(lane)
        threading.Thread(target=self._dispatch_loop, args=(lane,), name=f"gml-dispatch-{lane.index}",
                         daemon=True).start()
        return lane

    def _dispatch_loop(self, lane: _Lane) -> None:
        while True:
            with self._lock:
                while True:
                    if not self.inline:
                        if lane.proc is None and self._pending:
                            self._ensure_process(lane)
                        if lane.proc is not None:
                            self._drain_events(lane)
                    job_id = self._take(lane)
                    if job_id is not None:
                        break
                    self._lock.wait(timeout=0.5)
                self._pending.remove(job_id)
                job = self._jobs[job_id]
                if job["owner"]:
                    self._served[job["owner"]] = time.monotonic()
                # Reset the cancel flag before the job counts as running, under the lock `cancel` takes:
                # a Cancel from the moment it is running reaches it, even before the worker starts it.
                if self.inline:
                    lane.cancel = threading.Event()
                elif lane.cancel is not None:
                    lane.cancel.clear()
                job["state"] = "running"
                lane.running = job_id
            try:
                if self.inline:
                    self._run_inline(lane, job_id, job)
                else:
                    self._run_in_worker(lane, job_id, job)
            except Exception as e:  # noqa: BLE001 - the dispatcher must outlive any one job
                self._finish(job_id, "error", error=f"{type(e).__name__}: {e}")

    def _watch(self, lane: _Lane, job_id: str) -> None:
        """Stops a running job nobody waits for any more (its pages were closed)."""
        with self._lock:
            if self._abandoned(job_id) and lane.cancel is not None and not lane.cancel.is_set():
                lane.cancel.set()

    def _run_inline(self, lane: _Lane, job_id: str, job: dict) -> None:
        from .kinds import execute

        cancel = lane.cancel
        checked = [time.monotonic()]

        def progress(done, total, label):
            job["progress"] = {"done": done, "total": total, "label": label}

        def should_cancel():
            if time.monotonic() - checked[0] > ABANDON_CHECK_S:
                checked[0] = time.monotonic()
                self._watch(lane, job_id)
            return cancel.is_set()

        try:
            result = execute(job["kind"], job["params"],
                             progress=progress if job["kind"] in PROGRESS_KINDS else None,
                             should_cancel=should_cancel)
            self._finish(job_id, "done", result=result)
        except Exception as e:  # noqa: BLE001
            self._finish(job_id, "error", error=f"{type(e).__name__}: {e}")

    def _ensure_process(self, lane: _Lane) -> None:
        with lane.proc_lock:
            if lane.proc is None or not lane.proc.is_alive():
                lane.ready.clear()
                ctx = mp.get_context("spawn")
                lane.jobs_q, lane.events_q, lane.cancel = ctx.Queue(), ctx.Queue(), ctx.Event()
                lane.proc = ctx.Process(target=_worker_main,
                                        args=(lane.jobs_q, lane.events_q, lane.cancel, os.getpid(),
                                              lane.index if lane.index else None),
                                        name=f"gpu-memory-lab-worker-{lane.index}", daemon=True)
                lane.proc.start()

    def _drain_events(self, lane: _Lane) -> None:
        while True:
            try:
                what, _jid, payload = lane.events_q.get_nowait()
            except queue.Empty:
                return
            if what == "device":
                self._set_device(lane, payload)

    def _set_device(self, lane: _Lane, info: dict) -> None:
        lane.device = info
        lane.ready.set()
        if lane.index == 0 and not self.inline:
            # One worker per GPU: the others start now, so every device is on the home page before any job.
            while len(self._lanes) < int(info.get("device_count") or 1):
                self._ensure_process(self._add_lane())

    def _run_in_worker(self, lane: _Lane, job_id: str, job: dict) -> None:
        self._ensure_process(lane)
        lane.jobs_q.put((job_id, job["kind"], job["params"]))
        deadline = time.monotonic() + MAX_JOB_SECONDS
        next_watch = time.monotonic() + ABANDON_CHECK_S
        while True:
            if time.monotonic() > next_watch:
                next_watch = time.monotonic() + ABANDON_CHECK_S
                self._watch(lane, job_id)
            try:
                what, jid, payload = lane.events_q.get(timeout=0.5)
            except queue.Empty:
                if not lane.proc.is_alive():
                    self._finish(job_id, "error", error="the worker process died (see the server log); it was restarted")
                    return
                if time.monotonic() > deadline:
                    lane.proc.kill()
                    lane.proc.join()
                    self._finish(job_id, "error",
                                 error=f"stopped after {MAX_JOB_SECONDS:.0f} s (max_job_seconds, docs/operators.md)")
                    return
                continue
            if what == "device":
                with self._lock:
                    self._set_device(lane, payload)
                continue
            if jid != job_id:
                continue
            if what == "progress":
                job["progress"] = payload
            elif what == "done":
                self._finish(job_id, "done", result=_read_result(payload))
                return
            elif what == "error":
                self._finish(job_id, "error", error=payload)
                return
