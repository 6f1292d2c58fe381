"""One worker process that runs jobs one at a time, shared by every browser session.

Why a process: torch.cuda peak statistics are per process and device, so two sessions measuring
in threads of the web server would corrupt each other's peaks. Why one at a time: the same, and a
classroom's GPU is shared. Why spawn: CUDA cannot be re-initialised in a forked child.
Identical jobs are run once: a queued or running twin is joined, a finished one is served from
the cache, so thirty students pressing Run on the same preset cost one run.
"""

from __future__ import annotations

import itertools
import json
import multiprocessing as mp
import os
import queue
import secrets
import threading
import time
from collections import OrderedDict

from .limits import load as load_limits

LIMITS = load_limits()
MAX_JOB_SECONDS = LIMITS.max_job_seconds


class QueueFull(RuntimeError):
    pass
CACHE_SIZE = 256
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


def _report_device(events) -> None:
    from .device_info import device_info

    try:
        events.put(("device", None, device_info() | {"shared_with_another_server": _shared_device}))
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


def _worker_main(jobs, events, cancel, parent_pid: int | None = None) -> None:
    from .jobs import execute

    global _shared_device
    _shared_device = not _claim_device()

    if parent_pid is not None:
        threading.Thread(target=_exit_with_parent, args=(parent_pid,), name="gml-parent-watch", daemon=True).start()

    # The web server asks the worker for the device view, so that only this process ever
    # creates a CUDA context (each context costs hundreds of MiB of GPU memory).
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
            result = execute(kind, params, progress=progress if kind in ("run", "timing_rounds") else None, should_cancel=cancel.is_set)
            events.put(("done", job_id, result))
        except Exception as e:  # noqa: BLE001 - every failure is reported to the page, never raised there
            events.put(("error", job_id, f"{type(e).__name__}: {e}"))
        _report_device(events)


def _key(kind: str, params: dict) -> str:
    return kind + ":" + json.dumps(params, sort_keys=True, default=str)


class WorkerClient:
    """Thread-safe: Streamlit sessions call submit/status/cancel from their own threads."""

    def __init__(self, inline: bool | None = None):
        self.inline = os.environ.get("GPU_MEMORY_LAB_INLINE") == "1" if inline is None else inline
        self._lock = threading.Condition()
        self._jobs: dict[str, dict] = {}
        self._pending: list[str] = []
        self._by_key: dict[str, str] = {}
        self._cache: OrderedDict[str, dict] = OrderedDict()
        # A random prefix: ids never repeat, not even across a restarted server.
        self._ids = (f"j{secrets.token_hex(3)}-{n}" for n in itertools.count(1))
        self._running: str | None = None
        # One ticket per submission; joined submissions share a job, which is cancelled with its last ticket.
        self._tickets: dict[str, str] = {}
        self._finished_at: OrderedDict[str, float] = OrderedDict()
        self._proc = None
        self._cancel_current = None
        self._device: dict | None = None
        self._device_ready = threading.Event()
        self._proc_lock = threading.Lock()
        threading.Thread(target=self._dispatch_loop, name="gml-dispatch", daemon=True).start()

    # -- public API -------------------------------------------------------------------------
    def submit(self, kind: str, params: dict) -> str:
        key = _key(kind, params)
        with self._lock:
            self._expire()
            job_id = next(self._ids)
            if key in self._cache:
                self._cache.move_to_end(key)
                self._jobs[job_id] = self._new(kind, params, key, state="done", result=self._cache[key], cached=True)
                self._finished_at[job_id] = time.monotonic()
                return self._ticket(job_id, job_id)
            twin = self._by_key.get(key)
            if twin and self._jobs[twin]["state"] in ("queued", "running"):
                return self._ticket(twin, job_id)
            if len(self._pending) >= LIMITS.max_queue:
                raise QueueFull(f"the queue is full ({LIMITS.max_queue} jobs wait already); try again in a minute")
            self._jobs[job_id] = self._new(kind, params, key)
            self._ticket(job_id, job_id)
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
            position = self._pending.index(job_id) + (1 if self._running_id() else 0) if job_id in self._pending else 0
            return {k: job[k] for k in ("state", "progress", "result", "error", "cached")} | {"position": position}

    def cancel(self, ticket: str) -> None:
        """Withdraws one submission; the job stops only when no other learner still waits for it."""
        with self._lock:
            job_id = self._tickets.get(ticket, ticket)
            job = self._jobs.get(job_id)
            if job is None:
                return
            job["subscribers"].discard(ticket)
            if job["subscribers"]:
                return
            if job_id in self._pending:
                self._pending.remove(job_id)
                job["state"] = "cancelled"
                self._finished_at[job_id] = time.monotonic()
            elif job["state"] == "running" and self._cancel_current is not None:
                self._cancel_current.set()

    def device_info(self, timeout: float = 60.0) -> dict | None:
        """The worker's view of its device (name, total and free memory), refreshed after every job."""
        if self.inline:
            from .device_info import device_info

            return device_info()
        self._ensure_process()
        self._device_ready.wait(timeout)
        return self._device

    def queue_length(self) -> int:
        with self._lock:
            return len(self._pending) + (1 if self._running_id() else 0)

    # -- internals ----------------------------------------------------------------------------
    @staticmethod
    def _new(kind, params, key, state="queued", result=None, cached=False) -> dict:
        return {"kind": kind, "params": params, "key": key, "state": state, "progress": None,
                "result": result, "error": None, "cached": cached, "subscribers": set(), "tickets": []}

    def _ticket(self, job_id: str, ticket: str) -> str:
        self._tickets[ticket] = job_id
        self._jobs[job_id]["subscribers"].add(ticket)
        self._jobs[job_id]["tickets"].append(ticket)
        return ticket

    def _running_id(self):
        return self._running

    def _expire(self) -> None:
        """Finished jobs are kept JOB_TTL_S for their pages to collect, then dropped: the table stays bounded."""
        cutoff = time.monotonic() - JOB_TTL_S
        while self._finished_at and next(iter(self._finished_at.values())) < cutoff:
            job_id, _ = self._finished_at.popitem(last=False)
            job = self._jobs.pop(job_id, None)
            for ticket in (job or {}).get("tickets", ()):
                self._tickets.pop(ticket, None)

    def _finish(self, job_id: str, state: str, result=None, error=None) -> None:
        with self._lock:
            job = self._jobs[job_id]
            if state == "done" and result is not None and result.get("cancelled"):
                state = "cancelled"
            job.update(state=state, result=result, error=error)
            self._finished_at[job_id] = time.monotonic()
            if self._running == job_id:
                self._running = None
            if state == "done":
                self._cache[job["key"]] = result
                while len(self._cache) > CACHE_SIZE:
                    self._cache.popitem(last=False)
            if self._by_key.get(job["key"]) == job_id:
                del self._by_key[job["key"]]

    def _dispatch_loop(self) -> None:
        while True:
            with self._lock:
                while not self._pending:
                    self._lock.wait(timeout=0.5)
                    if not self.inline and self._proc is not None:
                        self._drain_events()
                job_id = self._pending.pop(0)
                job = self._jobs[job_id]
                # Reset the cancel flag before the job counts as running, under the lock `cancel` takes:
                # a Cancel from the moment it is running reaches it, even before the worker starts it.
                if self.inline:
                    self._cancel_current = threading.Event()
                elif self._cancel_current is not None:
                    self._cancel_current.clear()
                job["state"] = "running"
                self._running = job_id
            try:
                if self.inline:
                    self._run_inline(job_id, job)
                else:
                    self._run_in_worker(job_id, job)
            except Exception as e:  # noqa: BLE001 - the dispatcher must outlive any one job
                self._finish(job_id, "error", error=f"{type(e).__name__}: {e}")

    def _run_inline(self, job_id: str, job: dict) -> None:
        from .jobs import execute

        cancel = self._cancel_current

        def progress(done, total, label):
            job["progress"] = {"done": done, "total": total, "label": label}

        try:
            result = execute(job["kind"], job["params"], progress=progress if job["kind"] in ("run", "timing_rounds") else None,
                             should_cancel=cancel.is_set)
            self._finish(job_id, "done", result=result)
        except Exception as e:  # noqa: BLE001
            self._finish(job_id, "error", error=f"{type(e).__name__}: {e}")

    def _ensure_process(self):
        with self._proc_lock:
            self._start_if_needed()

    def _start_if_needed(self):
        if self._proc is None or not self._proc.is_alive():
            self._device_ready.clear()
            ctx = mp.get_context("spawn")
            self._jobs_q, self._events_q, self._cancel_current = ctx.Queue(), ctx.Queue(), ctx.Event()
            self._proc = ctx.Process(target=_worker_main,
                                     args=(self._jobs_q, self._events_q, self._cancel_current, os.getpid()),
                                     name="gpu-memory-lab-worker", daemon=True)
            self._proc.start()

    def _drain_events(self) -> None:
        while True:
            try:
                what, _jid, payload = self._events_q.get_nowait()
            except queue.Empty:
                return
            if what == "device":
                self._set_device(payload)

    def _set_device(self, info: dict) -> None:
        self._device = info
        self._device_ready.set()

    def _run_in_worker(self, job_id: str, job: dict) -> None:
        self._ensure_process()
        self._jobs_q.put((job_id, job["kind"], job["params"]))
        deadline = time.monotonic() + MAX_JOB_SECONDS
        while True:
            try:
                what, jid, payload = self._events_q.get(timeout=0.5)
            except queue.Empty:
                if not self._proc.is_alive():
                    self._finish(job_id, "error", error="the worker process died (see the server log); it was restarted")
                    return
                if time.monotonic() > deadline:
                    self._proc.kill()
                    self._proc.join()
                    self._finish(job_id, "error", error=f"stopped after {MAX_JOB_SECONDS:.0f} s (max_job_seconds, docs/operators.md)")
                    return
                continue
            if what == "device":
                self._set_device(payload)
                continue
            if jid != job_id:
                continue
            if what == "progress":
                job["progress"] = payload
            elif what == "done":
                self._finish(job_id, "done", result=payload)
                return
            elif what == "error":
                self._finish(job_id, "error", error=payload)
                return
