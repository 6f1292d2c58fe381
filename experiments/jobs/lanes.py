"""Where a job runs: a lane is one device and what runs its jobs, one at a time. `ProcessLane`: a worker process that
owns the device (the classroom server's; spawned, never forked, since CUDA cannot be re-initialised in a forked
child). `InlineLane`: the server process itself (GPU_MEMORY_LAB_INLINE=1, tests). The worker client
(experiments/jobs/worker.py) decides which job a lane runs next; a lane runs it to its end and reports back.

Why a process: torch.cuda peak statistics are per process and device, so two sessions measuring in threads of the
web server would corrupt each other's peaks.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import logging
import multiprocessing as mp
import os
import pickle
import queue
import tempfile
import threading
import time

from . import errors

PROGRESS_KINDS = ("run", "timing_rounds", "distributed")  # jobs that report progress as they go
ABANDON_CHECK_S = 2.0  # how often a running job checks that someone still waits for it

_shared_device = False  # in the worker: another lab server's worker holds this GPU
_device_lock = None


def _report_device(events, rates: bool = True) -> None:
    import torch

    from ..estimate.calibration import calibrated_report
    from ..measure.device import device_info

    try:
        info = device_info(rates=False)
        info |= (calibrated_report(info["type"]) if rates else {}) | {"shared_with_another_server": _shared_device}
        if info["type"] == "cuda":
            info["device_count"] = torch.cuda.device_count()  # the client starts one worker per GPU
        events.put(("device", None, info))
    except Exception as e:  # noqa: BLE001 - no device info is a message, not a dead worker
        events.put(("device", None, {"type": "unknown", "error": errors.message(e)}))


def _exit_with_parent(parent_pid: int) -> None:
    """A worker whose server died (even by SIGKILL) exits too, giving back its memory and its GPU."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent_pid:
            os._exit(0)


def cpu_threads() -> int:
    """A CPU worker's torch threads: one core fewer than it may use. The web server draws pages and answers polls
    while a run runs, and a parallel region waits for its slowest thread: on 2 cores with one other busy process a
    lesson run took twice as long on 2 threads as on 1 (1.07 vs 0.57 s), and on idle cores no longer (0.53 vs 0.49)."""
    return max(1, len(os.sched_getaffinity(0)) - 1)


def _warm_launcher() -> None:
    """Lesson 6's runs start from a launcher kept ready (experiments/distributed/launcher.keep_warm): a CPU worker's
    from the start; a GPU worker's once it has run one (every GPU has a worker, and most never run one)."""
    import torch

    from ..distributed.launcher import keep_warm

    with contextlib.suppress(OSError):
        keep_warm(None if torch.cuda.is_available() else "cpu")


def claim_device() -> bool:
    """One lab worker per GPU, and one per machine's CPU: a second server on the same machine would share the
    device (or the cores and the memory) and spoil both servers' measurements and fit checks. Returns False when
    another worker holds the device's lock file."""
    global _device_lock
    import torch

    name = f"cuda{torch.cuda.current_device()}" if torch.cuda.is_available() else "cpu"
    path = os.path.join(tempfile.gettempdir(), f"gpu-memory-lab-{name}.lock")
    _device_lock = open(path, "a")  # noqa: SIM115 - held for the life of the worker
    try:
        fcntl.flock(_device_lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False


def worker_main(
    jobs, events, cancel, parent_pid: int | None = None, device_index: int | None = None, rates: bool = True
) -> None:
    """A worker process: reports its device, then runs the jobs it is sent until it is sent None.
    `rates`: measure the device's rates and what a whole run costs after the first report (tens of seconds on a
    busy CPU); without them the page predicts no times (tests)."""
    global _shared_device
    import torch

    from .kinds import execute
    from .process_names import name_process

    name_process("gml-worker" + (f"-{device_index}" if device_index else ""))

    if device_index is not None:
        torch.cuda.set_device(device_index)  # before anything creates a context: this worker's one GPU
    elif not torch.cuda.is_available():
        torch.set_num_threads(cpu_threads())
    _shared_device = not claim_device()

    if parent_pid is not None:
        threading.Thread(target=_exit_with_parent, args=(parent_pid,), name="gml-parent-watch", daemon=True).start()

    # The web server asks the worker for the device view, so that only this process ever
    # creates a CUDA context (each context costs hundreds of MiB of GPU memory). First without the
    # device's measured rates (seconds on a busy CPU), so the first page does not wait for them.
    _report_device(events, rates=False)
    _report_device(events, rates=rates)
    if rates:  # a classroom worker (tests start theirs without rates, and need no launcher waiting)
        _warm_launcher()
    # Runs and leak scenarios call gc.collect() to measure what is freed; with torch and the engine imported (about
    # 290,000 objects) each full collection took 0.16-0.19 s, three per run. Frozen, they are never traversed again:
    # a leak scenario 0.51 -> 0.23 s. What the jobs create afterwards is collected as before.
    gc.collect()
    gc.freeze()
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
            result = execute(
                kind, params, progress=progress if kind in PROGRESS_KINDS else None, should_cancel=cancel.is_set
            )
            events.put(("done", job_id, _result_file(result) | _flags(result)))
        except Exception as e:  # noqa: BLE001 - every failure is reported to the page, never raised there
            events.put(("error", job_id, {"error": errors.message(e)[:2000], "error_info": errors.describe(e)}))
        _report_device(events, rates=rates)


def _result_file(result) -> dict:
    """A result travels through a file, and the pipe carries only its name. A worker killed while writing a
    long message to the pipe leaves half a message that blocks the server's reader forever (a run's result
    with its timeline is hundreds of KB); a message under PIPE_BUF bytes is written whole or not at all."""
    fd, path = tempfile.mkstemp(prefix="gpu-memory-lab-result-", suffix=".pickle")
    with os.fdopen(fd, "wb") as f:
        pickle.dump(result, f, protocol=pickle.HIGHEST_PROTOCOL)
    return {"result_file": path}


def _flags(result) -> dict:
    """Read off the result where it is made, so the server need not unpickle it to know them."""
    from .admission import cacheable

    cancelled = isinstance(result, dict) and bool(result.get("cancelled"))
    return {"flags": {"cancelled": cancelled, "cacheable": cacheable(result)}}


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


class ProcessLane(Lane):
    """Runs jobs in a worker process of its own, started on demand and again after it died or was stopped."""

    def __init__(self, index: int, max_seconds: float, rates: bool = True):
        super().__init__(index)
        self.max_seconds = max_seconds  # a job still running then is stopped (its worker killed and restarted)
        self.rates = rates
        self.proc = None
        self.jobs_q = self.events_q = self.inbox = None
        self.proc_lock = threading.Lock()

    def takes_jobs(self) -> bool:
        return self.device is not None  # once its worker has reported its device

    def arm(self) -> None:
        if self.cancel is not None:
            self.cancel.clear()

    def ensure_process(self) -> None:
        with self.proc_lock:
            if self.proc is None or not self.proc.is_alive():
                self.ready.clear()
                ctx = mp.get_context("spawn")
                self.jobs_q, self.events_q, self.cancel = ctx.Queue(), ctx.Queue(), CancelFlag(ctx)
                # The worker's reports are read by a thread of their own: a worker killed in the middle of writing one
                # can leave half a message in the pipe, and a read of it would wait forever where the job's loop must
                # see the death.
                self.inbox = queue.Queue()
                threading.Thread(target=_forward, args=(self.events_q, self.inbox), daemon=True).start()
                self.proc = ctx.Process(
                    target=worker_main,
                    args=(
                        self.jobs_q,
                        self.events_q,
                        self.cancel,
                        os.getpid(),
                        self.index if self.index else None,
                        self.rates,
                    ),
                    name=f"gpu-memory-lab-worker-{self.index}",
                    daemon=True,
                )
                self.proc.start()

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
            try:
                what, jid, payload = inbox.get(timeout=0.5)
            except queue.Empty:
                if not proc.is_alive():
                    _log_death(self.index, proc, job["kind"])
                    client.finish(
                        job_id,
                        "error",
                        error="the worker process died (see the server log); it was restarted",
                        error_info=errors.worker_died(),
                    )
                    return
                if time.monotonic() > deadline:
                    proc.kill()
                    proc.join()
                    client.finish(
                        job_id,
                        "error",
                        error_info=errors.timeout(limit),
                        error=f"stopped after {limit:.0f} s (max_job_seconds, docs/operators.md)",
                    )
                    return
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
                return
            elif what == "error":
                client.finish(job_id, "error", error=payload["error"], error_info=payload["error_info"])
                return


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


def _log_death(index: int, proc, kind: str) -> None:
    """The server's log says that a worker died, how, and during what: the learner's page says only that it did."""
    code = proc.exitcode
    how = f"exit status {code}"
    if code is not None and code < 0:
        import signal

        with contextlib.suppress(ValueError):
            how = f"signal {signal.Signals(-code).name}" + (" (the OOM killer, or a kill)" if code == -9 else "")
    logging.getLogger(__name__).warning(
        "experiment worker %s (pid %s) died during a %s job: %s; a new one starts for the next job",
        index,
        proc.pid,
        kind,
        how,
    )
