"""Runs one configuration for real and measures it phase by phase (see DESIGN.md, measurement model)."""

from __future__ import annotations

import contextlib
import datetime as _dt
import gc
import re
import statistics
import time
import traceback

import torch
from torch.utils.flop_counter import FlopCounterMode

from ..core.capacity import capacity
from ..core.config import ExperimentConfig
from ..core.limits import load as load_limits
from ..estimate import workspaces as op_workspace
from ..estimate.estimator import estimate
from ..training.models import build_model, make_batch
from ..training.step import TrainState, train_step
from ..training.strategies import float32_precision, make_optimizer, make_scaler, optimizer_state_tensors
from .device import cpu_available_bytes, device_info, resolve_device
from .history import HistoryTracker, Recording
from .tracker import StorageTracker

# A run is refused up front only when the estimate is this far past the capacity, so runs near
# the limit are still tried and an out-of-memory error becomes a result the learner can study.
REFUSE_FACTOR = 1.15


class WouldNotFit(ValueError):
    def __init__(self, message: str, estimate: dict):
        super().__init__(message)
        self.estimate = estimate


class Cancelled(Exception):
    pass


def warm_up_cuda(device: torch.device) -> None:
    """Allocate the cuBLAS workspaces (forward thread and autograd's backward thread) before measuring.

    They live in `memory_allocated` for the rest of the process; without this, whichever run comes
    first in a process would carry them in its peak.
    """
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        w = torch.randn(64, 64, device=device, dtype=dtype, requires_grad=True)
        b = torch.randn(64, device=device, dtype=dtype, requires_grad=True)
        (w @ w).sum().backward()
        # A Linear with a bias runs through cuBLASLt, whose own 1 MiB workspace is allocated on first use.
        for x in (w, w.view(4, 16, 64)):
            torch.nn.functional.linear(x, w, b).sum().backward()
    torch.cuda.synchronize(device)


def measure_workspaces(signatures: list[str], device: torch.device) -> dict[str, int]:
    """Kernels' scratch memory for these ops, measured here and cached on disk (experiments/estimate/workspaces.py).
    An op too large to probe, or one the probe cannot reproduce, stays unmeasured: the estimate says so."""
    path = op_workspace.cache_path(torch.cuda.get_device_properties(device).name)
    table = op_workspace.load(path)
    for sig in signatures:
        if sig not in table:
            try:
                table |= op_workspace.measure_all([sig], device, path)
            except Exception as e:  # noqa: BLE001 - an op that cannot be probed stays unmeasured, the run goes on
                print(f"workspace probe failed ({type(e).__name__}: {str(e)[:200]}): {sig[:200]}", flush=True)
    gc.collect()
    torch.cuda.empty_cache()  # the probes' inputs must not stay in the reserved figure of the run that follows
    return {s: table[s] for s in signatures if s in table}


def measure_workspaces_job(signatures) -> dict:
    """The worker's job for the page's estimate: measure what the estimate lists as unmeasured, on this device."""
    if not isinstance(signatures, list) or len(signatures) > 500 or not all(
            op_workspace.is_signature(s) for s in signatures):
        raise ValueError("signatures: a list of at most 500 op signatures from the estimate")
    device = resolve_device("auto")
    if device.type != "cuda":
        return {"measured": 0}
    return {"measured": len(measure_workspaces(signatures, device))}


def capacity_bytes(cfg: ExperimentConfig, device: torch.device) -> int | None:
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return capacity(cfg.budget_mb, free, cached)
    return capacity(cfg.budget_mb, cpu_available_bytes())


def check_fits(cfg: ExperimentConfig, device: torch.device, copies: int = 1) -> tuple[int | None, dict]:
    """Refuse a configuration whose estimate is far past the capacity (runs, profiles and gradient checks alike:
    on a CPU an unchecked one is killed by the OOM killer, worker and all). `copies`: states alive at once."""
    capacity = capacity_bytes(cfg, device)
    est = estimate(cfg, capacity_bytes=capacity, device_type=device.type)
    if est["unmeasured"]:
        est = estimate(cfg, capacity_bytes=capacity, device_type=device.type,
                       transients=measure_workspaces(est["signatures"], device))
    cap = load_limits().max_peak_gib
    if cap is not None and copies * est["peak_bytes"] > cap * 2**30:
        # The operator's limit: "force" (or a shared link that sets it) cannot lift it.
        raise WouldNotFit(f"estimated peak {copies * est['peak_bytes'] / 2**30:.2f} GiB is above this server's "
                          f"limit of {cap:g} GiB per run (max_peak_gib)", est)
    host = cpu_available_bytes() if device.type == "cpu" else None
    simulated = cfg.budget_mb is not None and host is not None and cfg.budget_mb * 2**20 < host
    if cfg.force and host is not None and not simulated and copies * est["peak_bytes"] > REFUSE_FACTOR * host:
        # On a CPU nothing reports an out-of-memory error: the system kills the process, worker and all.
        # A budget below the host's memory makes the tracker raise a simulated one instead.
        raise WouldNotFit(
            f"estimated peak {copies * est['peak_bytes'] / 2**30:.2f} GiB does not fit the {host / 2**30:.2f} GiB "
            "of memory this machine has free; on a CPU, running past it is stopped by the system, not reported, so "
            "force cannot run it: set budget_mb below the free memory to see a simulated out-of-memory error",
            est,
        )
    if not cfg.force and capacity is not None and copies * est["peak_bytes"] > REFUSE_FACTOR * capacity:
        raise WouldNotFit(
            f"estimated peak {copies * est['peak_bytes'] / 2**30:.2f} GiB does not fit the "
            f"{capacity / 2**30:.2f} GiB available on {device.type}; reduce batch, width or layers, "
            "or force the run to see the out-of-memory error",
            est,
        )
    return capacity, est


def _requested_bytes(message: str) -> int | None:
    exact = re.search(r"Tried to allocate [\d.]+ \w+ \((\d+) bytes\)", message)
    if exact:
        return int(exact.group(1))
    m = re.search(r"[Tt]ried to allocate ([\d.]+) ([KMGT]?i?B)", message)
    if not m:
        return None
    scale = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}.get(m.group(2), 1)
    return int(float(m.group(1)) * scale)


class _Recorder:
    """Wraps each phase: synchronize, reset the peak, run, synchronize, read the counters."""

    def __init__(self, device, tracker: StorageTracker, progress, should_cancel, total_units):
        self.device = device
        self.cuda = device.type == "cuda"
        self.tracker = tracker
        self.phases: list[dict] = []
        self.current = ("setup", 0)
        self.progress = progress
        self.should_cancel = should_cancel
        self.total_units = total_units
        self.done_units = 0
        self.state: TrainState | None = None
        self.history: Recording | None = None  # the allocation timeline (experiments/measure/history.py), when asked for

    def tick(self, label: str) -> None:
        self.done_units += 1
        if self.progress:
            self.progress(min(self.done_units, self.total_units), self.total_units, label)
        if self.should_cancel and self.should_cancel():
            raise Cancelled()

    @contextlib.contextmanager
    def __call__(self, name: str, step: int, micro: int | None = None):
        self.current = (name, step)
        if self.history is not None:
            self.history.phase(name, step, micro)
        tr = self.tracker
        if self.cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        tr.begin_phase({"model": "parameters", "optimizer": "optimizer_state", "data": "data"}.get(name, f"_{name}"))
        t0 = time.perf_counter()
        try:
            yield
        except torch.OutOfMemoryError:
            # The phase that failed is part of the story: its peak is the memory in use when it failed.
            self._append(name, step, micro, t0, failed=True)
            raise
        if self.cuda:
            torch.cuda.synchronize(self.device)
        self._promote(name)
        self._append(name, step, micro, t0)
        self.tick(f"{name} (step {step})" if step else name)

    def _append(self, name: str, step: int, micro: int | None, t0: float, failed: bool = False) -> None:
        ms = (time.perf_counter() - t0) * 1e3
        if self.cuda:
            allocated = torch.cuda.memory_allocated(self.device)
            reserved = torch.cuda.memory_reserved(self.device)
            peak = torch.cuda.max_memory_allocated(self.device)
        else:
            allocated, reserved, peak = self.tracker.current, None, self.tracker.phase_peak
        row = {"step": step, "micro": micro, "phase": name, "allocated_bytes": allocated,
               "reserved_bytes": reserved, "peak_bytes": peak, "ms": round(ms, 4)}
        if failed:
            row["failed"] = True
        self.phases.append(row)

    def _promote(self, name: str) -> None:
        """Give what a phase left alive its real category."""
        tr, s = self.tracker, self.state
        if name == "forward":
            tr.retag_live("_forward", "activations")
        elif name == "backward" and s is not None:
            tr.retag((p.grad for p in s.model.parameters()), "gradients")
        elif name == "optimizer_step" and s is not None:
            tr.retag(optimizer_state_tensors(s.optimizer), "optimizer_state")


def run_experiment(cfg: ExperimentConfig, progress=None, should_cancel=None, history: bool = True) -> dict:
    """`history`: also record every allocation of the setup phases and measured steps (result["history"])."""
    device = resolve_device(cfg.device)
    started = _dt.datetime.now(_dt.timezone.utc)
    t_start = time.perf_counter()
    cuda = device.type == "cuda"
    with StorageTracker():
        torch.empty(0)  # the first dispatch mode of a process imports torch._dynamo: not the model's time
    if cuda:
        gc.collect()
        torch.cuda.empty_cache()
        warm_up_cuda(device)
    capacity, est = check_fits(cfg, device)

    budget = int(cfg.budget_mb * 2**20) if cfg.budget_mb is not None else None
    tracker_budget = budget if not cuda else None
    # On CUDA the frames come from the allocator's own trace; on CPU the tracker takes them.
    tracker = (HistoryTracker(budget_bytes=tracker_budget, frames=not cuda) if history
               else StorageTracker(budget_bytes=tracker_budget))
    total_units = 3 + cfg.steps * (2 + 2 * cfg.accum) + (1 if cfg.timing_steps else 0) + 1
    rec = _Recorder(device, tracker, progress, should_cancel, total_units)
    if history:
        rec.history = Recording(device, tracker)
    result = {
        "config": cfg.to_dict(), "device": device_info(device.type), "phases": rec.phases,
        "baseline_bytes": 0, "peak_bytes": None, "peak_phase": None, "step_ms": None,
        "samples_per_s": None, "tflops": None, "flops_per_step": None,
        "breakdown": None, "breakdown_steady": None, "estimate": est, "driver": None,
        "memory_summary": None, "oom": None, "losses": [], "cancelled": False,
        "started_at": started.isoformat(timespec="seconds"),
    }
    if cuda:
        # The fit check's probes and the first device report's rate measurement (large matmuls) leave cached
        # segments; a run that starts on them gets its blocks carved differently than a fresh program would.
        gc.collect()
        torch.cuda.empty_cache()
        result["baseline_bytes"] = torch.cuda.memory_allocated(device)
        if budget is not None:
            total = torch.cuda.get_device_properties(device).total_memory
            torch.cuda.set_per_process_memory_fraction(min(1.0, budget / total), device)
    holder: dict = {}
    try:
        if rec.history is not None:
            rec.history.start()
        with float32_precision(cfg):
            _measure(cfg, device, rec, tracker, holder, result)
    except torch.OutOfMemoryError as e:
        traceback.clear_frames(e.__traceback__)
        message = str(e)
        result["oom"] = {
            "phase": rec.current[0], "step": rec.current[1],
            "message": message.split("\n")[0][:600],
            "requested_bytes": _requested_bytes(message),
            "budget_bytes": budget,
            # What was in use when the allocation failed (the failed phase's row holds the same figure).
            "in_use_bytes": rec.phases[-1]["peak_bytes"] if rec.phases and rec.phases[-1].get("failed") else None,
        }
        del e
    except Cancelled:
        result["cancelled"] = True
    finally:
        if rec.history is not None:
            # After an OOM or a cancel: the timeline up to that moment (and recording always stops here).
            result["history"] = rec.history.finish()
        release(rec, holder, device)
        if cuda and budget is not None:
            torch.cuda.set_per_process_memory_fraction(1.0, device)
    after = torch.cuda.memory_allocated(device) if cuda else tracker.current
    result["allocated_after_bytes"] = after
    summarize_peak(result, rec.phases, tracker, cuda)
    result["duration_s"] = round(time.perf_counter() - t_start, 3)
    return result


def release(rec: _Recorder, holder: dict, device: torch.device) -> None:
    """Drops every tensor of the run and gives the allocator's cache back: after a finish, an OOM or a cancel."""
    rec.state = None
    holder.clear()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


def summarize_peak(result: dict, phases: list[dict], tracker: StorageTracker, cuda: bool) -> None:
    """The result's peak and its phase from `phases`, and the breakdown at the peak (single device and per rank)."""
    if phases:
        top = max(phases, key=lambda p: p["peak_bytes"])
        result["peak_bytes"] = top["peak_bytes"]
        result["peak_phase"] = {"step": top["step"], "phase": top["phase"]}
    if result["breakdown"] is None and tracker.peak:
        result["breakdown"] = tracker.peak_by_category()
    if cuda and result["breakdown"] and result["peak_bytes"] is not None:
        # The allocator's peak also holds what is not a tensor the tracker sees (cuDNN workspaces, 512-byte
        # block rounding): shown as its own category so the bars add up to the measured peak.
        rest = result["peak_bytes"] - result["baseline_bytes"] - sum(result["breakdown"].values())
        if rest > 0:
            result["breakdown"]["other"] = rest


def train_phases(cfg, device, rec: _Recorder, tracker: StorageTracker, holder: dict, losses: list | None,
                 wrap_scaler=None) -> TrainState:
    """Setup phases, then cfg.steps training steps, each phase wrapped by `rec` (shared by the run and the replay).

    `wrap_scaler` lets the replay replace GradScaler's data-dependent skip decision (fake tensors have no values).
    """
    torch.manual_seed(cfg.seed)
    with tracker:
        with rec("model", 0):
            holder["model"] = build_model(cfg, device)
        tracker.param_keys = {p.untyped_storage()._cdata for p in holder["model"].parameters()}
        with rec("optimizer", 0):
            holder["optimizer"] = make_optimizer(cfg, holder["model"].parameters())
            holder["scaler"] = make_scaler(cfg, device)
            if wrap_scaler and holder["scaler"] is not None:
                holder["scaler"] = wrap_scaler(holder["scaler"])
        with rec("data", 0):
            holder["inputs"], holder["targets"] = make_batch(cfg, device, cfg.seed + 1)
        state = TrainState(cfg, device, holder["model"], holder["optimizer"], holder["scaler"],
                           holder["inputs"], holder["targets"])
        holder["state"] = rec.state = state
        for step in range(1, cfg.steps + 1):
            loss = train_step(state, step, rec)
            if losses is not None:
                losses.append(float(loss))
            del loss
    return state


def _measure(cfg, device, rec: _Recorder, tracker: StorageTracker, holder: dict, result: dict) -> None:
    state = train_phases(cfg, device, rec, tracker, holder, result["losses"])
    if rec.history is not None:
        result["history"] = rec.history.finish()  # before the timing steps: only the measured steps are recorded
    result["breakdown"] = tracker.peak_by_category()
    result["breakdown_steady"] = tracker.by_category()
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        result["driver"] = {"free_bytes": free, "total_bytes": total}
        result["memory_summary"] = torch.cuda.memory_summary(device, abbreviated=True)

    if cfg.timing_steps:
        samples = _time_steps(state, cfg.timing_steps, rec.should_cancel)
        result["step_ms"] = _stats(samples)
        rec.tick("timing")
    with FlopCounterMode(display=False) as counter:
        train_step(state)
    result["flops_per_step"] = int(counter.get_total_flops())
    rec.tick("flops")
    if result["step_ms"]:
        seconds = result["step_ms"]["median"] / 1e3
        result["samples_per_s"] = cfg.batch / seconds
        result["tflops"] = result["flops_per_step"] / seconds / 1e12


def _time_steps(state: TrainState, n: int, should_cancel=None) -> list[float]:
    """Un-instrumented steps for the step time. A Cancel is honoured between steps (every 10th on CUDA, where
    the check is host time between launches): a long timing run used to ignore it until its end."""
    def check(i: int, every: int) -> None:
        if should_cancel is not None and i % every == 0 and should_cancel():
            raise Cancelled()

    if state.device.type == "cuda":
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
        for i, (start, end) in enumerate(events):
            check(i, 10)
            start.record()
            train_step(state)
            end.record()
        torch.cuda.synchronize(state.device)
        return [start.elapsed_time(end) for start, end in events]
    samples = []
    for i in range(n):
        check(i, 1)
        t0 = time.perf_counter()
        train_step(state)
        samples.append((time.perf_counter() - t0) * 1e3)
    return samples


def _stats(samples: list[float]) -> dict:
    ordered = sorted(samples)
    if len(ordered) >= 2:
        deciles = statistics.quantiles(ordered, n=10, method="inclusive")
        p10, p90 = deciles[0], deciles[-1]
    else:
        p10 = p90 = ordered[0]
    return {"median": statistics.median(ordered), "p10": p10, "p90": p90, "samples": [round(s, 4) for s in samples]}
