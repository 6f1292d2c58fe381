"""Runs one configuration for real and measures it phase by phase (see DESIGN.md, measurement model)."""

from __future__ import annotations

import datetime as _dt
import gc
import re
import time
import traceback

import torch

from ..core.config import ExperimentConfig
from ..core.units import GIB, KIB, MIB
from ..training.step import TrainState, train, train_step
from ..training.strategies import float32_precision
from .device import device_info, resolve_device, warm_up_cuda
from .fits import check_fits
from .flops import flop_counter
from .history import Recording
from .phases import Cancelled, PhaseRecorder
from .timing import step_stats, time_steps
from .tracker import MemoryTracker


def _requested_bytes(message: str) -> int | None:
    exact = re.search(r"Tried to allocate [\d.]+ \w+ \((\d+) bytes\)", message)
    if exact:
        return int(exact.group(1))
    m = re.search(r"[Tt]ried to allocate ([\d.]+) ([KMGT]?i?B)", message)
    if not m:
        return None
    scale = {"B": 1, "KiB": KIB, "MiB": MIB, "GiB": GIB, "TiB": 2**40}.get(m.group(2), 1)
    return int(float(m.group(1)) * scale)


def run_experiment(cfg: ExperimentConfig, progress=None, should_cancel=None, history: bool = True, spec=None) -> dict:
    """`history`: also record every allocation of the setup phases and measured steps (result["history"]).
    `spec`: the model where cfg does not name it (an import path, from the command line)."""
    device = resolve_device(cfg.device)
    started = _dt.datetime.now(_dt.timezone.utc)
    t_start = time.perf_counter()
    cuda = device.type == "cuda"
    with MemoryTracker():
        torch.empty(0)  # the first dispatch mode of a process imports torch._dynamo: not the model's time
    if cuda:
        gc.collect()
        torch.cuda.empty_cache()
        warm_up_cuda(device)
    capacity, est = check_fits(cfg, device, spec=spec)

    budget = int(cfg.budget_mb * MIB) if cfg.budget_mb is not None else None
    if est.get("predicted") is False:  # forced without an estimate: on a CPU, a simulated out-of-memory error
        budget = est["run_budget"]
    recording = Recording(device) if history else None
    # On CUDA the allocator raises its own out-of-memory errors; on CPU the tracker simulates one at the budget.
    tracker = MemoryTracker(
        budget_bytes=budget if not cuda else None,
        listeners=[recording] if history else [],
        host_apart=cuda and cfg.offload_activations,  # offloaded activations: host memory, beside the device's
    )
    total_units = 3 + cfg.steps * (2 + 2 * cfg.accum) + (1 if cfg.timing_steps else 0) + 1
    rec = PhaseRecorder(device, tracker, progress, should_cancel, total_units)
    result = {
        "config": cfg.to_dict(),
        "device": device_info(device.type),
        "phases": rec.phases,
        "baseline_bytes": 0,
        "peak_bytes": None,
        "peak_phase": None,
        "step_ms": None,
        "samples_per_s": None,
        "tflops": None,
        "flops_per_step": None,
        "breakdown": None,
        "breakdown_steady": None,
        "estimate": est,
        "driver": None,
        "memory_summary": None,
        "oom": None,
        "losses": [],
        "cancelled": False,
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
    state = TrainState(cfg, device, spec=spec)
    try:
        if recording is not None:
            recording.start(tracker)
        with float32_precision(cfg):
            _measure(state, rec, tracker, recording, result)
    except torch.OutOfMemoryError as e:
        traceback.clear_frames(e.__traceback__)
        message = str(e)
        result["oom"] = {
            "phase": rec.current[0],
            "step": rec.current[1],
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
        if recording is not None:
            # After an OOM or a cancel: the timeline up to that moment (and recording always stops here).
            result["history"] = recording.finish()
        release(rec, state, device)
        if cuda and budget is not None:
            torch.cuda.set_per_process_memory_fraction(1.0, device)
    after = torch.cuda.memory_allocated(device) if cuda else tracker.current
    result["allocated_after_bytes"] = after
    summarize_peak(result, rec.phases, tracker, cuda)
    result["duration_s"] = round(time.perf_counter() - t_start, 3)
    return result


def release(rec: PhaseRecorder, state: TrainState, device: torch.device) -> None:
    """Drops every tensor of the run and gives the allocator's cache back: after a finish, an OOM or a cancel."""
    rec.state = None
    state.clear()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


def summarize_peak(result: dict, phases: list[dict], tracker: MemoryTracker, cuda: bool) -> None:
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


def _measure(
    state: TrainState, rec: PhaseRecorder, tracker: MemoryTracker, recording: Recording | None, result: dict
) -> None:
    cfg, device = state.cfg, state.device
    train(state, rec, tracker, on_loss=lambda loss: result["losses"].append(float(loss)))
    if recording is not None:
        result["history"] = recording.finish()  # before the timing steps: only the measured steps are recorded
    result["breakdown"] = tracker.peak_by_category()
    result["breakdown_steady"] = tracker.by_category()
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        result["driver"] = {"free_bytes": free, "total_bytes": total}
        result["memory_summary"] = torch.cuda.memory_summary(device, abbreviated=True)

    if cfg.timing_steps:
        result["step_ms"] = step_stats(time_steps(state, cfg.timing_steps, rec.should_cancel, rec.timing_progress))
        rec.tick("timing")
    with flop_counter() as counter:
        train_step(state)
    result["flops_per_step"] = int(counter.get_total_flops())
    rec.tick("flops")
    if result["step_ms"]:
        seconds = result["step_ms"]["median"] / 1e3
        result["samples_per_s"] = cfg.batch / seconds
        result["tflops"] = result["flops_per_step"] / seconds / 1e12
