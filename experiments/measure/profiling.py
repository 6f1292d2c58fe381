"""torch.profiler over one training step, reduced to plain rows the app can sort."""

from __future__ import annotations

import datetime as _dt
import gc

import torch
from torch.profiler import ProfilerActivity, profile

from ..core.config import ExperimentConfig
from ..training.step import build_state, train_step
from ..training.strategies import float32_precision
from .device import device_info, resolve_device
from .fits import check_fits


def profile_step(cfg: ExperimentConfig, row_limit: int = 40) -> dict:
    device = resolve_device(cfg.device)
    cuda = device.type == "cuda"
    check_fits(cfg, device)
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    state = build_state(cfg, device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with float32_precision(cfg):
        train_step(state)  # warm-up: lazy optimizer state and library workspaces
        with profile(activities=activities, profile_memory=True, record_shapes=True) as prof:
            train_step(state)
            if cuda:
                torch.cuda.synchronize(device)
    rows = []
    for e in prof.key_averages():
        rows.append(
            {
                "name": e.key,
                "calls": e.count,
                "self_device_memory_bytes": int(getattr(e, "self_device_memory_usage", 0) or 0),
                "device_memory_bytes": int(getattr(e, "device_memory_usage", 0) or 0),
                "self_cpu_memory_bytes": int(e.self_cpu_memory_usage or 0),
                "device_time_us": float(getattr(e, "device_time_total", 0.0) or 0.0),
                "cpu_time_us": float(e.cpu_time_total or 0.0),
            }
        )
    key = "self_device_memory_bytes" if cuda else "self_cpu_memory_bytes"
    rows.sort(key=lambda r: abs(r[key]), reverse=True)
    summary = torch.cuda.memory_summary(device, abbreviated=True) if cuda else None
    del state, prof
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return {
        "rows": rows[:row_limit],
        "sort_key": key,
        "memory_summary": summary,
        "device": device_info(device.type),
        "config": cfg.to_dict(),
        "started_at": started,
    }
