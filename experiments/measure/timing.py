"""Fair step-time comparison: strategies interleaved, whole rounds repeated.

A launch-bound step (a few ms) moves by tens of percent between two runs of the same code in one
process, so the spread *within* one run says nothing about the next run. Each round builds every
strategy afresh (rotating the order, so none always runs first), warms it up and times a few steps.
Strategies are compared round by round: the ratio of their medians within each round, whose median
and range over rounds are the comparison and its spread (experiments/core/metrics.py: paired).
"""

from __future__ import annotations

import datetime as _dt
import gc
import statistics
import time

import torch

from ..core.config import ConfigError, ExperimentConfig
from ..core.rounds import LIMITS, machine_load, paired
from ..training.step import TrainState, build_state, train_step
from ..training.strategies import float32_precision
from .device import device_info, resolve_device, warm_up_cuda
from .phases import Cancelled

MAX_STRATEGIES = 12


def time_steps(state: TrainState, n: int, should_cancel=None, on_step=None) -> list[float]:
    """Un-instrumented steps for the step time. A Cancel is honoured between steps (every 10th on CUDA, where
    the check is host time between launches): a long timing run used to ignore it until its end. `on_step(i, n)` hears
    of each step's launch, so a long timing run shows progress (on CUDA the device may still be behind)."""

    def check(i: int, every: int) -> None:
        if should_cancel is not None and i % every == 0 and should_cancel():
            raise Cancelled()
        if on_step is not None and i:
            on_step(i, n)

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


def step_stats(samples: list[float]) -> dict:
    """Median and deciles of step times (ms), with the samples."""
    ordered = sorted(samples)
    if len(ordered) >= 2:
        deciles = statistics.quantiles(ordered, n=10, method="inclusive")
        p10, p90 = deciles[0], deciles[-1]
    else:
        p10 = p90 = ordered[0]
    return {"median": statistics.median(ordered), "p10": p10, "p90": p90, "samples": [round(s, 4) for s in samples]}


def time_rounds(
    strategies: list[dict], rounds: int = 3, steps: int = 10, warmup: int = 2, progress=None, should_cancel=None
) -> dict:
    """strategies: [{"id", "config": ExperimentConfig dict}], all on one device."""
    for name, value in (("rounds", rounds), ("steps", steps), ("warmup", warmup)):
        lo, hi = LIMITS[name]
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise ConfigError(name, f"got {value!r}; allowed range is [{lo}, {hi}]", "range", value=value, lo=lo, hi=hi)
    if not strategies or len(strategies) > MAX_STRATEGIES:
        raise ConfigError(
            "strategies",
            f"give 1 to {MAX_STRATEGIES} strategies, got {len(strategies or [])}",
            "range",
            value=len(strategies or []),
            lo=1,
            hi=MAX_STRATEGIES,
        )
    configs = [(s["id"], ExperimentConfig.from_dict(s["config"])) for s in strategies]
    devices = {resolve_device(c.device) for _, c in configs}
    if len(devices) != 1:
        raise ConfigError("device", "all strategies of a timing comparison must run on one device", "same_device")
    device = devices.pop()
    if device.type == "cuda":
        warm_up_cuda(device)
    load_start = machine_load()
    per_round: dict[str, list[float]] = {sid: [] for sid, _ in configs}
    total, done = rounds * len(configs), 0
    for r in range(rounds):
        order = configs[r % len(configs) :] + configs[: r % len(configs)]
        for sid, cfg in order:
            if should_cancel and should_cancel():
                raise Cancelled()
            with float32_precision(cfg):
                state = build_state(cfg, device)
                for _ in range(warmup):
                    train_step(state)
                samples = time_steps(state, steps)
            per_round[sid].append(statistics.median(samples))
            del state
            gc.collect()
            if device.type == "cuda":
                torch.cuda.empty_cache()
            done += 1
            if progress:
                progress(done, total, f"{sid} (round {r + 1})")
    rows = []
    for sid, cfg in configs:
        values = per_round[sid]
        rows.append(
            {
                "id": sid,
                "config": cfg.to_dict(),
                "round_ms": [round(v, 4) for v in values],
                "median_ms": statistics.median(values),
                "min_ms": min(values),
                "max_ms": max(values),
            }
        )
    result = {
        "kind": "timing_rounds",
        "device": device_info(device.type),
        "rounds": rounds,
        "steps": steps,
        "warmup": warmup,
        "strategies": rows,
        # the machine's load around the rounds: a speed verdict needs cores to spare (core/rounds.py: too_busy)
        "load_start": load_start,
        "load_end": machine_load(),
        "started_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    # Each strategy against the first, as the page shows it; derived from round_ms, which stays the source.
    result["paired"] = [paired(result, sid, configs[0][0]) for sid, _ in configs[1:]]
    return result
