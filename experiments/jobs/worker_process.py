"""What runs inside a worker process (experiments/jobs/lanes.py starts them): it waits, torch imported, for the word
to start, takes its device, reports it, then runs the jobs it is sent one at a time.

Why it waits first: a lane keeps one such process ready beside its worker, so that a worker killed mid-class (the
OOM killer, a crash) is replaced at once. A fresh one took 40-74 s on a loaded 2-core server (torch's import and the
device's rates measured again); a ready one is told the rates its predecessor measured on the same device. It touches
no device while it waits: on CUDA 12 even `set_device` creates a context (hundreds of MiB of GPU memory).
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import os
import pickle
import tempfile
import threading
import time

from . import errors

PROGRESS_KINDS = ("run", "timing_rounds", "distributed")  # jobs that report progress as they go
RATE_KEYS = ("rates", "rates_error")  # the part of a device report measured once per device

_shared_device = False  # in the worker: another lab server's worker holds this GPU
_device_lock = None


def _report_device(events, rates: bool = True, carried: dict | None = None) -> None:
    """`carried`: the rates a predecessor on this device measured, reported instead of measuring them again."""
    import torch

    from ..estimate.calibration import calibrated_report
    from ..measure.device import device_info

    try:
        info = device_info(rates=False)
        measured = carried if carried is not None else calibrated_report(info["type"]) if rates else {}
        info |= measured | {"shared_with_another_server": _shared_device}
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


def _ready() -> None:
    """What every job needs, imported and run once on the CPU while nothing waits for it: a process's first run pays
    3 s of first calls (a leak scenario of 0.3 s took 3.4 s as a new worker's first job). Device-free, one thread."""
    import torch

    from ..core.config import ExperimentConfig
    from ..estimate import calibration  # noqa: F401
    from ..measure import device  # noqa: F401
    from ..measure.run import run_experiment

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run_experiment(ExperimentConfig(device="cpu", layers=2, width=32, batch=8, steps=2, timing_steps=0))
    finally:
        torch.set_num_threads(threads)


def worker_main(
    jobs,
    events,
    cancel,
    parent_pid: int | None = None,
    device_index: int | None = None,
    rates: bool = True,
    standby: bool = False,
) -> None:
    """A worker process: waits for ("start", carried rates or None) (None: exit), reports its device, then runs the
    jobs it is sent until it is sent None. `standby`: a spare, which imports what jobs need while it waits.
    `rates`: measure the device's rates and what a whole run costs after the first report (tens of seconds on a
    busy CPU), unless a predecessor's are carried; without them the page predicts no times (tests)."""
    global _shared_device
    from .process_names import name_process

    worker_name = "gml-worker" + (f"-{device_index}" if device_index else "")
    name_process("gml-spare" + worker_name[10:] if standby else worker_name)  # ps tells a spare from the worker
    if parent_pid is not None:
        threading.Thread(target=_exit_with_parent, args=(parent_pid,), name="gml-parent-watch", daemon=True).start()
    if standby:
        _ready()
    start = jobs.get()
    if start is None:
        return
    _, carried = start
    name_process(worker_name)
    import torch

    from .kinds import execute

    if device_index is not None:
        torch.cuda.set_device(device_index)  # before anything creates a context: this worker's one GPU
    elif not torch.cuda.is_available():
        torch.set_num_threads(cpu_threads())
    _shared_device = not claim_device()

    # The web server asks the worker for the device view, so that only this process ever
    # creates a CUDA context (each context costs hundreds of MiB of GPU memory). First without the
    # device's measured rates (seconds on a busy CPU), so the first page does not wait for them.
    _report_device(events, rates=False)
    _report_device(events, rates=rates, carried=carried)
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
        _report_device(events, rates=rates, carried=carried)  # its free memory now; the rates of the start


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
