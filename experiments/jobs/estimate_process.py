"""One estimate process of the pool (experiments/jobs/estimates.py): it runs the replays it is sent, one at a time,
and reports each one's end, its error, and the progress of a search as it goes."""

from __future__ import annotations

import importlib
import inspect
import os
import threading
import time
from collections.abc import Callable

from .process_names import name_process


def call(target: str, args: tuple, kwargs: dict, progress: Callable[[int, int], None] | None = None):
    """`progress(done, planned)` goes to a target that reports its replays (What fits), none to others."""
    module, name = target.split(":")
    fn = getattr(importlib.import_module(module), name)
    if progress is not None and "progress" in _parameters(fn):
        kwargs = {**kwargs, "progress": progress}
    return fn(*args, **kwargs)


def _parameters(fn) -> tuple[str, ...]:
    try:
        return tuple(inspect.signature(fn).parameters)
    except (TypeError, ValueError):  # a builtin without a signature takes no progress
        return ()


def estimator_main(requests, replies, parent: int) -> None:
    """One estimate process: runs what it is sent, one at a time, until it is sent None or its server dies."""
    threading.Thread(target=_exit_with, args=(parent,), daemon=True).start()
    name_process("gml-estimate")
    # A replay computes no numbers (fake tensors): a second intra-op thread buys it nothing and takes a core from the
    # run worker, whose timings the lessons read.
    importlib.import_module("torch").set_num_threads(1)
    _warm_up()
    replies.put(("ready", None, None))
    while True:
        item = requests.get()
        if item is None:
            return
        rid, target, args, kwargs = item

        def progress(done: int, planned: int, rid=rid) -> None:
            replies.put(("progress", rid, (done, planned)))

        try:
            replies.put(("done", rid, call(target, args, kwargs, progress)))
        except Exception as e:  # noqa: BLE001 - the page gets the error as its estimate's message
            replies.put(("error", rid, f"{type(e).__name__}: {e}"[:2000]))


def _warm_up() -> None:
    """torch and the replay imported, and a process's first replays made before the first request: a learner's first
    estimate in a fresh process took 4.0 s where the next took 0.24 (an MLP of 4 layers on 2 cores)."""
    from ..core.config import ExperimentConfig
    from ..estimate.estimator import estimate

    for model in ("mlp", "transformer"):
        estimate(ExperimentConfig(device="cpu", model=model, layers=2, batch=4), None)


def _exit_with(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(0)
