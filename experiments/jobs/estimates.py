"""Estimates off the web server's request threads: a small pool of spawned processes (not the run worker's GPU
lanes) that run the fake-tensor replays, bounded in time, fair between sessions, and dropped when their tab goes.

Why a process: the replay is CPU-bound Python (and torch, which the web server never imports); a page asks and moves on.
In a class a session runs one estimate at a time (policy.may_start).

A request is a target ("module:function"), its arguments (plain, picklable) and the session that asked. Its
Future is the one cache (bounded, least recently used dropped). An estimate still running after `max_seconds` is
stopped (its process replaced) and refused with EstimateTooLong, which names the limit. A refusal is an answer and is
kept like a result: the engine's own (a configuration it cannot predict) for good, a time limit's for REFUSAL_KEEP_S
(the machine may be less busy later); otherwise every poll of the page that asked started the same replay again and
the page never showed the refusal. What says nothing about the configuration (a process that died, a closed tab) is
not kept.
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import os
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as NotYet

from ..core.capacity import verdict
from ..core.limits import load as load_limits
from . import policy
from .estimate_errors import EngineRefusal, EstimateCancelled, EstimateTooLong
from .estimate_process import call, estimator_main
from .process_exit import stop_at_exit

MAX_SECONDS = 20.0  # an estimate that takes longer is refused: a page waits for none longer than this
# A model of one's own at full size (an 8B-parameter transformer: tens of seconds of replay; its levers x batch grid a
# dozen replays) is estimated on a click, not on every slider move: it may take this long.
OWN_MODEL_SECONDS = 300.0
PENDING = "pending: the estimate is being computed"  # what a caller that stopped waiting gets
WATCH_S = 0.5
START_RETRY_S = 5.0
REFUSAL_KEEP_S = 300.0  # a time limit's refusal is answered from the cache this long
TAB_GRACE_S = 15.0  # a tab disconnected this long counts as closed (experiments/jobs/worker.py has the same)


def _frozen(data):
    if isinstance(data, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in data.items()))
    if isinstance(data, (list, tuple)):
        return tuple(_frozen(v) for v in data)
    return data


class _Slot:
    """One estimate process and the request it runs."""

    def __init__(self, index: int):
        self.index, self.proc, self.requests, self.replies = index, None, None, None
        self.running: str | None = None
        self.ready = threading.Event()
        stop_at_exit(self)

    def start(self) -> None:
        ctx = mp.get_context("spawn")
        self.requests, self.replies = ctx.Queue(), ctx.Queue()
        self.ready.clear()
        self.proc = ctx.Process(
            target=estimator_main,
            args=(self.requests, self.replies, os.getpid()),
            name=f"gpu-memory-lab-estimates-{self.index}",
            daemon=True,
        )
        self.proc.start()

    def stop(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)


class EstimatePool:
    """Thread-safe. `owner_alive(session)`: whether a tab is still there (its waiting requests are dropped, and a
    running one is stopped, when not)."""

    def __init__(
        self, processes: int = 2, max_seconds: float = MAX_SECONDS, size: int = 2048, grace_s: float = TAB_GRACE_S
    ):
        """`processes=0`: no processes, each estimate runs in the thread that asks (the inline worker, tests)."""
        self.max_seconds, self.size, self.inline = max_seconds, size, processes == 0
        self.lock = threading.Condition()
        self.owner_alive: Callable[[str], bool] | None = None
        self._presence = policy.Presence(grace_s)
        self._futures: OrderedDict[object, Future] = OrderedDict()
        self._too_long: dict[object, float] = {}  # when a key was refused for its time
        self._progress: dict[object, tuple[int, int]] = {}  # key -> (replays done, planned) while it runs
        self._requests: dict[str, dict] = {}  # rid -> {"key", "owner", "seq", "target", "args", "kwargs"}
        self._pending: list[str] = []
        self._served: dict[str, float] = {}
        self._ids = (f"e{n}" for n in itertools.count(1))
        self._seq = itertools.count()
        self._closed = False
        self._slots = [_Slot(i) for i in range(processes)]
        for slot in self._slots:
            threading.Thread(target=self._serve, args=(slot,), name=f"gml-estimates-{slot.index}", daemon=True).start()

    def request(
        self,
        key,
        target: str,
        args: tuple = (),
        kwargs: dict | None = None,
        owner: str | None = None,
        max_seconds: float | None = None,
    ):
        """The Future of this estimate: the cached one, the one already asked for, or a new request (refused past
        `max_seconds`, the pool's limit unless given)."""
        with self.lock:
            future = self._futures.get(key)
            refused = self._too_long.get(key)
            if future is not None and refused is not None and time.monotonic() - refused > REFUSAL_KEEP_S:
                del self._futures[key], self._too_long[key]
                future = None
            if future is not None:
                self._futures.move_to_end(key)
                return future
            future = self._futures[key] = Future()
            while len(self._futures) > self.size:
                self._too_long.pop(self._futures.popitem(last=False)[0], None)
            if self.inline:
                return self._inline(key, future, target, args, kwargs or {})
            rid = next(self._ids)
            self._requests[rid] = {
                "key": key,
                "owner": owner,
                "seq": next(self._seq),
                "target": target,
                "args": args,
                "kwargs": kwargs or {},
                "future": future,
                "max_seconds": max_seconds or self.max_seconds,
            }
            self._pending.append(rid)
            self.lock.notify_all()
            return future

    def get(
        self,
        key,
        target: str,
        args: tuple,
        kwargs: dict,
        owner: str | None = None,
        wait: float | None = None,
        max_seconds: float | None = None,
        progress: Callable[[int, int], None] | None = None,
    ):
        """The value, or PENDING when it is not ready after `wait` seconds (None: wait for it). While it waits,
        `progress(done, planned)` is called in the caller's thread whenever the running replays report."""
        future = self.request(key, target, args, kwargs, owner, max_seconds)
        deadline = None if wait is None else time.monotonic() + wait
        seen = None
        while True:
            step = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                return future.result(timeout=step if progress is None else min(step or WATCH_S, WATCH_S))
            except NotYet:
                if deadline is not None and time.monotonic() >= deadline:
                    return PENDING
            with self.lock:
                now = self._progress.get(key)
            if now is not None and now != seen:
                seen = now
                progress(*now)

    def estimate(self, cfg, capacity, where: str, table, owner=None, wait=None):
        """A run's estimate (an ExperimentConfig) or a data-parallel rank's (a DistributedConfig) on `where`, with
        the measured workspaces `table` (a frozen mapping, or None)."""
        kwargs = {"device_type": where, "transients": dict(table or ())}
        key = (type(cfg).__name__, _frozen(cfg.to_dict()), where, table)
        single = type(cfg).__name__ == "ExperimentConfig"
        if single:  # replayed once, whatever the capacity it is judged against (free memory moves after each run)
            target, args = "experiments.estimate.estimator:estimate", (cfg, None)
        else:
            target, args = "experiments.distributed.estimate:estimate_sharded", (cfg,)
        own = getattr(getattr(cfg, "config", cfg), "model_source", "")
        est = self.get(key, target, args, kwargs, owner, wait, OWN_MODEL_SECONDS if own else None)
        return (
            est | verdict(est["peak_bytes"], capacity)
            if single and isinstance(est, dict) and "peak_bytes" in est
            else est
        )

    def model_fits(
        self,
        cfg,
        capacity: int,
        where: str,
        owner=None,
        wait=None,
        precisions=(),
        overhead=None,
        methods=False,
        progress=None,
    ):
        """A model of one's own on one device: the levers x batch grid (experiments/distributed/model_fits.py), on a
        card of `capacity` bytes whose process holds `overhead` outside the allocator; with `methods`, which
        fine-tuning method runs there (experiments/distributed/method_fits.py); methods="own": whether cfg's own does."""
        key = ("model_fits", _frozen(cfg.to_dict()), capacity, where, tuple(precisions), overhead, methods)
        if methods:
            target = "experiments.distributed.method_fits:methods_on_card"
            kwargs = {"overhead_bytes": overhead or 0, "own_only": methods == "own"}
        else:
            target = "experiments.distributed.model_fits:what_fits"
            kwargs = {"device_type": where, "precisions": tuple(precisions) or None, "overhead_bytes": overhead}
        return self.get(key, target, (cfg, capacity), kwargs, owner, wait, OWN_MODEL_SECONDS, progress)

    def what_fits(self, dcfg, capacity: int, where: str, table, owner=None, wait=None):
        params = dcfg.config.to_dict()
        kwargs = {"device_type": where, "batch_mode": dcfg.batch_mode, "transients": dict(table or ())}
        key = ("what_fits", _frozen(params), capacity, dcfg.batch_mode, where, table)
        return self.get(key, "experiments.distributed.estimate:what_fits", (params, capacity), kwargs, owner, wait)

    def warm(self, timeout: float = 120.0) -> bool:
        """Starts every process and waits until each has started (a test, or a server at start)."""
        deadline = time.monotonic() + timeout
        with self.lock:
            self.lock.notify_all()
        return all(slot.ready.wait(max(0.0, deadline - time.monotonic())) for slot in self._slots)

    def pids(self) -> list[int]:  # the estimate processes running now, named gml-estimate (process_names.py)
        return [s.proc.pid for s in self._slots if s.proc is not None and s.proc.is_alive()]

    def close(self) -> None:
        """Stops the processes for good (a test's end); what still waits fails."""
        with self.lock:
            self._closed = True
            for rid in list(self._pending):
                self._pending.remove(rid)
                self._forget(rid, EstimateCancelled("the estimate pool was closed"))
            for slot in self._slots:
                slot.stop()
            self.lock.notify_all()

    def busy(self) -> int:
        with self.lock:
            return len(self._pending) + sum(1 for s in self._slots if s.running)

    # -- internals ----------------------------------------------------------------------------
    def _inline(self, key, future: Future, target: str, args: tuple, kwargs: dict) -> Future:
        self.lock.release()  # concurrent askers of this key wait on its future, others are not held

        def progress(done: int, planned: int) -> None:
            with self.lock:
                self._progress[key] = (done, planned)

        try:
            future.set_result(call(target, args, kwargs, progress))
        except Exception as exc:  # noqa: BLE001 - the engine's answer, kept and handed to every caller
            future.set_exception(exc)
            return future
        except BaseException as exc:  # an interrupt says nothing about the configuration: not kept
            future.set_exception(exc)
            with self.lock:
                if self._futures.get(key) is future:
                    del self._futures[key]
            raise
        finally:
            self.lock.acquire()
            self._progress.pop(key, None)
        return future

    def _alive(self, owner: str | None) -> bool:
        if owner is None or self.owner_alive is None:
            return True
        try:
            return not self._presence.gone(owner, bool(self.owner_alive(owner)), time.monotonic())
        except Exception:  # noqa: BLE001 - when in doubt the estimate is still wanted
            return True

    def _forget(self, rid: str, error: BaseException | None = None, value=None) -> None:
        req = self._requests.pop(rid)
        self._progress.pop(req["key"], None)
        if error is not None:
            if isinstance(error, EstimateTooLong):
                self._too_long[req["key"]] = time.monotonic()
            elif not isinstance(error, EngineRefusal) and self._futures.get(req["key"]) is req["future"]:
                del self._futures[req["key"]]  # says nothing about the configuration: the next page asks again
            req["future"].set_exception(error)
        else:
            req["future"].set_result(value)

    def _take(self) -> str | None:
        running = {self._requests[s.running]["owner"] for s in self._slots if s.running in self._requests}
        for rid in policy.fair_order(self._pending, self._requests, self._served):
            req = self._requests[rid]
            if not self._alive(req["owner"]):
                self._pending.remove(rid)
                self._forget(rid, EstimateCancelled("the page that asked for this estimate was closed"))
                continue
            if not policy.may_start(req["owner"], running, self._served, time.monotonic()):
                continue  # waits for its session's running estimate (policy.may_start)
            self._pending.remove(rid)
            if req["owner"]:
                self._served[req["owner"]] = time.monotonic()
            return rid
        return None

    def _serve(self, slot: _Slot) -> None:
        while True:
            with self.lock:
                rid = None
                while rid is None:
                    if self._closed:
                        return
                    if slot.proc is not None and not slot.proc.is_alive() and not slot.ready.is_set():
                        self._failed_start(slot)
                    if slot.proc is None or not slot.proc.is_alive():
                        slot.start()
                    if not slot.ready.is_set():
                        self._wait_ready(slot)
                        continue
                    rid = self._take()
                    if rid is None:
                        self.lock.wait(timeout=WATCH_S)
                req = self._requests[rid]
                slot.running = rid
            slot.requests.put((rid, req["target"], req["args"], req["kwargs"]))
            self._wait_reply(slot, rid, req)
            with self.lock:
                slot.running = None

    def _failed_start(self, slot: _Slot) -> None:
        """A process that died before it was ready fails what waits (no page says "estimating" forever), and is
        started again only after a pause (no loop of processes that cannot start)."""
        why = RuntimeError(f"the estimate process could not start (exit status {slot.proc.exitcode}; see the log)")
        for rid in list(self._pending):
            self._pending.remove(rid)
            self._forget(rid, why)
        self.lock.wait(timeout=START_RETRY_S)

    def _wait_ready(self, slot: _Slot) -> None:
        try:
            slot.replies.get(timeout=0)
            slot.ready.set()
        except queue.Empty:
            self.lock.wait(timeout=0.1)

    def _wait_reply(self, slot: _Slot, rid: str, req: dict) -> None:
        limit = req.get("max_seconds") or self.max_seconds
        deadline = time.monotonic() + limit
        while True:
            try:
                what, got, payload = slot.replies.get(timeout=WATCH_S)
            except queue.Empty:
                what = None
            with self.lock:
                if what == "progress" and got == rid:
                    self._progress[req["key"]] = payload
                    continue
                if what in ("done", "error") and got == rid:
                    self._forget(rid, EngineRefusal(payload) if what == "error" else None, payload)
                    return
                stop = None
                if not slot.proc.is_alive():
                    stop = RuntimeError("the estimate process died (see the server log); it was restarted")
                elif time.monotonic() > deadline:
                    stop = EstimateTooLong(limit)
                elif not self._alive(req["owner"]):
                    stop = EstimateCancelled("the page that asked for this estimate was closed")
                if stop is not None:
                    slot.stop()  # the replay cannot be interrupted from outside: its process is replaced
                    slot.proc = None
                    self._forget(rid, stop)
                    return


_shared: EstimatePool | None = None
_shared_lock = threading.Lock()


def shared_pool(owner_alive: Callable[[str], bool] | None = None) -> EstimatePool:
    """The server's one estimate pool (a module global, like the worker client: "Clear cache" must not drop it)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            inline = os.environ.get("GPU_MEMORY_LAB_INLINE") == "1"
            _shared = EstimatePool(0 if inline else load_limits().estimate_processes)
        if owner_alive is not None:
            _shared.owner_alive = owner_alive
        return _shared
