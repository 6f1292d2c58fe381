"""Where a job runs: a lane is one device and what runs its jobs, one at a time. `ProcessLane`: a worker process that
owns the device (the classroom server's; spawned, never forked, since CUDA cannot be re-initialised in a forked
child). `InlineLane`: the server process itself (GPU_MEMORY_LAB_INLINE=1, tests). The worker client
(experiments/jobs/worker.py) decides which job a lane runs next; a lane runs it to its end and reports back.

Why a process: torch.cuda peak statistics are per process and device, so two sessions measuring in threads of the
web server would corrupt each other's peaks.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import queue
import threading
import time
from dataclasses import dataclass

from . import errors
from .process_exit import stop_at_exit
from .worker_process import PROGRESS_KINDS, RATE_KEYS, worker_main

ABANDON_CHECK_S = 2.0  # how often a running job checks that someone still waits for it
SPARE_ENV = "GPU_MEMORY_LAB_SPARE_WORKER"  # "0": no spare worker (one process fewer, a slower recovery)


def _read_blob(payload) -> tuple[bytes | None, dict | None]:
    """The pickled result a worker wrote (its bytes, not unpickled) and its flags; (None, None) for a payload
    that is not a result file."""
    if not (isinstance(payload, dict) and "result_file" in payload):
        return None, None
    path = payload["result_file"]
    try:
        with open(path, "rb") as f:
            return f.read(), payload.get("flags") or {}
    finally:
        with contextlib.suppress(OSError):
            os.remove(path)


class Lane:
    """One device. `running`: the job it runs; `held_by`: a multi-GPU job started on lane 0 that uses it too."""

    inline = False

    def __init__(self, index: int):
        self.index = index
        self.running: str | None = None
        self.held_by: str | None = None
        self.device: dict | None = None
        self.ready = threading.Event()
        self.cancel = None

    @property
    def idle(self) -> bool:
        return self.running is None and self.held_by is None

    def takes_jobs(self) -> bool:
        return True

    def arm(self) -> None:
        """A fresh cancel flag for the job about to run (under the client's lock, before it counts as running)."""

    def tend(self, client, pending: bool) -> None:
        """Between jobs, under the client's lock: whatever keeps the lane ready."""

    def run(self, client, job_id: str, job: dict) -> None:
        raise NotImplementedError


class InlineLane(Lane):
    """Runs a job in the calling thread of the server process."""

    inline = True

    def arm(self) -> None:
        self.cancel = threading.Event()

    def run(self, client, job_id: str, job: dict) -> None:
        from .kinds import execute

        cancel = self.cancel
        checked = [time.monotonic()]

        def progress(done, total, label):
            job["progress"] = {"done": done, "total": total, "label": label}

        def should_cancel():
            if time.monotonic() - checked[0] > ABANDON_CHECK_S:
                checked[0] = time.monotonic()
                client.watch(self, job_id)
            return cancel.is_set()

        try:
            result = execute(
                job["kind"],
                job["params"],
                progress=progress if job["kind"] in PROGRESS_KINDS else None,
                should_cancel=should_cancel,
            )
            client.finish(job_id, "done", result=result)
        except Exception as e:  # noqa: BLE001
            client.finish(job_id, "error", error=errors.message(e), error_info=errors.describe(e))


@dataclass
class _Worker:
    """One worker process and its channels: the jobs it is sent, the reports it sends (read into `inbox` by a thread
    of their own), its cancel flag."""

    proc: object
    jobs_q: object
    inbox: queue.Queue
    cancel: object


class ProcessLane(Lane):
    """Runs jobs in a worker process of its own, started on demand and again after it died or was stopped.
    `spare`: keep a second process ready (torch imported, no device touched) to take over at once when the worker
    dies or is stopped; it is started while the lane is idle and no job waits, never beside the first worker's rate
    measurement (on 2 cores a spare started between a class's queued runs put the median run 22 s later)."""

    def __init__(self, index: int, max_seconds: float, rates: bool = True, spare: bool | None = None):
        super().__init__(index)
        self.max_seconds = max_seconds  # a job still running then is stopped (its worker killed and restarted)
        self.rates = rates
        # By default a classroom's lane (one that measures rates) keeps a spare; docs/operators.md says what it costs.
        self.spare = rates and os.environ.get(SPARE_ENV) != "0" if spare is None else spare
        self.proc = None
        self.jobs_q = self.inbox = None
        self.standby: _Worker | None = None
        self.proc_lock = threading.Lock()
        stop_at_exit(self)

    def stop(self) -> None:
        """Kills this lane's worker and its spare (the server exits)."""
        for proc in (self.proc, self.standby.proc if self.standby else None):
            if proc is not None and proc.is_alive():
                proc.kill()
                proc.join(1)

    def takes_jobs(self) -> bool:
        return self.device is not None  # once its worker has reported its device

    def arm(self) -> None:
        if self.cancel is not None:
            self.cancel.clear()

    def _spawn(self, standby: bool) -> _Worker:
        ctx = mp.get_context("spawn")
        jobs_q, events_q, cancel = ctx.Queue(), ctx.Queue(), CancelFlag(ctx)
        # The worker's reports are read by a thread of their own: a worker killed in the middle of writing one can
        # leave half a message in the pipe, and a read of it would wait forever where the job's loop must see the death.
        inbox = queue.Queue()
        threading.Thread(target=_forward, args=(events_q, inbox), daemon=True).start()
        proc = ctx.Process(
            target=worker_main,
            args=(jobs_q, events_q, cancel, os.getpid(), self.index if self.index else None, self.rates, standby),
            name=f"gpu-memory-lab-worker-{self.index}" + ("-spare" if standby else ""),
            daemon=True,
        )
        proc.start()
        return _Worker(proc, jobs_q, inbox, cancel)

    def ensure_process(self) -> None:
        """A live worker: this one, else the spare told to start with the rates measured on this device, else a new one."""
        with self.proc_lock:
            if self.proc is not None and self.proc.is_alive():
                return
            spare, self.standby = self.standby, None
            worker = spare if spare is not None and spare.proc.is_alive() else self._spawn(standby=False)
            carried = {k: self.device[k] for k in RATE_KEYS if k in self.device} if self.device else {}
            worker.jobs_q.put(("start", carried or None))
            self.ready.clear()
            self.proc, self.jobs_q, self.inbox, self.cancel = worker.proc, worker.jobs_q, worker.inbox, worker.cancel

    def keep_spare(self) -> None:
        """Starts the spare if this lane keeps one and has none: called while the lane is idle and its worker has
        reported its device with its rates (a spare importing torch beside a run or a rate measurement would slow it)."""
        if not self.spare or not self.idle or self.device is None:
            return
        if self.rates and not self.device.keys() & set(RATE_KEYS):
            return
        with self.proc_lock:
            if self.proc is None or not self.proc.is_alive():
                return
            if self.standby is not None and not self.standby.proc.is_alive():
                # A spare that died waiting would die again: the lane goes on without one, and the log says so.
                logging.getLogger(__name__).warning(
                    "the spare worker of lane %s exited (%s) before it was needed; no spare from now on",
                    self.index,
                    self.standby.proc.exitcode,
                )
                self.spare, self.standby = False, None
            elif self.standby is None:
                self.standby = self._spawn(standby=True)

    def tend(self, client, pending: bool) -> None:
        if self.proc is None and pending:
            self.ensure_process()
        elif self.proc is not None and self.ready.is_set() and not self.proc.is_alive():
            # A worker that had reported its device and was killed while idle is replaced now, not at the next job
            # (one that died before its report is not: it may die again, and the next job says so).
            _log_death(self.index, self.proc, None)
            self.ensure_process()
        if self.proc is not None:
            self.drain_events(client)
            if not pending:  # never beside a queue: a spare's start (torch, one run) slowed a class's runs
                self.keep_spare()

    def drain_events(self, client) -> None:
        """The device reports a worker sent while no job ran (called under the client's lock)."""
        while self.inbox is not None:
            try:
                what, _jid, payload = self.inbox.get_nowait()
            except queue.Empty:
                return
            if what == "device":
                client.set_device(self, payload)

    def run(self, client, job_id: str, job: dict) -> None:
        """Runs the job in the lane's worker. A worker that dies mid-job (killed by an operator, by the OOM killer
        for another process's memory, or by a fault) takes the job with it: the job runs once more in the worker that
        takes its place, since every learner who joined it would otherwise lose it; a second death is the job's own
        doing (its memory, a crash it causes) and fails it. A job stopped at its time limit is not run again."""
        for attempt in (1, 2):
            with client.lock:  # a job every learner has withdrawn from is not tried again
                last = attempt == 2 or not job.get("subscribers")
            if self._attempt(client, job_id, job, last):
                return
            job.update(progress=None, retried=True)  # the second try starts from the beginning; the page says why

    def _attempt(self, client, job_id: str, job: dict, last: bool) -> bool:
        """One try of the job; False where its worker died and the job may be tried again (not `last`)."""
        self.ensure_process()
        # The job's worker is this one: a page that asks for the device while it runs starts the next worker once this
        # one died (device_info), and the job must see its own worker's death, not wait on the new one's reports.
        with self.proc_lock:
            proc, inbox, jobs_q = self.proc, self.inbox, self.jobs_q
        jobs_q.put((job_id, job["kind"], job["params"]))
        limit = self.max_seconds
        deadline = time.monotonic() + limit
        next_watch = time.monotonic() + ABANDON_CHECK_S
        while True:
            if time.monotonic() > next_watch:
                next_watch = time.monotonic() + ABANDON_CHECK_S
                client.watch(self, job_id)
            # Checked before every report, not only when none came: a job that reports its progress more often than
            # every half second was never stopped at its time limit.
            if time.monotonic() > deadline:
                proc.kill()
                proc.join()
                self.ensure_process()
                client.finish(
                    job_id,
                    "error",
                    error_info=errors.timeout(limit),
                    error=f"stopped after {limit:.0f} s (max_job_seconds, docs/operators.md)",
                )
                return True
            try:
                what, jid, payload = inbox.get(timeout=0.5)
            except queue.Empty:
                if not proc.is_alive():
                    _log_death(self.index, proc, job["kind"], again=not last)
                    self.ensure_process()  # the spare takes over now, before the next learner's job asks
                    if not last:
                        return False
                    client.finish(
                        job_id,
                        "error",
                        error=f"the worker process died {'twice ' if job.get('retried') else ''}on this job (see the"
                        " server log); it was restarted",
                        error_info=errors.worker_died(),
                    )
                    return True
                continue
            if what == "device":
                with client.lock:
                    client.set_device(self, payload)
                continue
            if jid != job_id:
                continue
            if what == "progress":
                job["progress"] = payload
            elif what == "done":
                blob, flags = _read_blob(payload)
                if blob is None:
                    client.finish(job_id, "done", result=payload)
                else:
                    client.finish(job_id, "done", blob=blob, flags=flags)
                return True
            elif what == "error":
                client.finish(job_id, "error", error=payload["error"], error_info=payload["error_info"])
                return True


class CancelFlag:
    """A job's Cancel, shared with its worker process as one byte without a lock. multiprocessing's Event takes a lock
    the two processes share: a worker killed while it checks the flag (it does, between phases) can keep that lock,
    and the server's next clear() of it would wait forever, with every learner's run queued behind it."""

    def __init__(self, ctx):
        self.value = ctx.RawValue("b", 0)

    def set(self) -> None:
        self.value.value = 1

    def clear(self) -> None:
        self.value.value = 0

    def is_set(self) -> bool:
        return bool(self.value.value)


def _forward(events, inbox: queue.Queue) -> None:
    """A worker's reports into the server's own queue, until its pipe closes (a stuck read of a dead worker's last half
    message blocks this thread only, and the next worker gets a pipe and a thread of its own)."""
    with contextlib.suppress(EOFError, OSError, ValueError):
        while True:
            inbox.put(events.get())


def _log_death(index: int, proc, kind: str | None, again: bool = False) -> None:
    """The server's log says that a worker died, how, and during what, and whether its job runs again: the learner's
    page says only that it did."""
    code = proc.exitcode
    how = f"exit status {code}"
    if code is not None and code < 0:
        import signal

        with contextlib.suppress(ValueError):
            how = f"signal {signal.Signals(-code).name}" + (" (the OOM killer, or a kill)" if code == -9 else "")
    logging.getLogger(__name__).warning(
        "experiment worker %s (pid %s) died %s: %s; another takes its place%s",
        index,
        proc.pid,
        f"during a {kind} job" if kind else "between jobs",
        how,
        " and runs the job again" if again else "",
    )
