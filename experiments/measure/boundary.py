"""The largest batch that really runs on a card, measured on this GPU: what "What fits" answers, confirmed where a
learner acts on it. The estimate's answer is where the trials start; each trial trains two steps (the optimizer
state appears in step 1, the peak moves in step 2) at one batch in a fresh process, on the card emulated here.

A card of C bytes is emulated on this GPU: after CUDA and cuBLAS have started, the allocator may hold C less what the
process already holds outside it (`torch.cuda.set_per_process_memory_fraction`). A trial runs when no out-of-memory
error was raised and the most the process held (the allocator's reserved peak plus what it holds outside it at the
end: the CUDA context grows as kernels load) is within C. What the process holds outside the allocator is read from
the driver's free memory, so the first trial needs the GPU to itself; the others reuse its figures.

    python -m experiments.measure.boundary '{"config": {...}, "card_bytes": N, "outside": null}'   # one trial
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable

from ..core.units import GIB
from .fresh_process import run_module

STEPS = 2
TRIAL_TIMEOUT_S = 600


def on_card(work: Callable, card_bytes: int, outside: dict | None = None) -> dict:
    """Runs `work(device)` in this process as on a card of `card_bytes` (a fresh process: the allocator's setting is
    read when CUDA starts). `outside`: what the process holds outside the allocator at the start and the end, from an
    earlier trial that had the GPU to itself; None measures it here. The process that starts the trials must hold no
    CUDA context of its own, or the first trial counts it as its own."""
    import torch

    dev = torch.device("cuda", torch.cuda.current_device())
    total = torch.cuda.get_device_properties(dev).total_memory
    if card_bytes > total:
        raise ValueError(f"card_bytes: {card_bytes} is more than this GPU's {total} bytes; it cannot be emulated here")
    for dtype in (torch.float32, torch.bfloat16):  # cuBLAS's handles and workspaces, as any first step makes them
        w = torch.randn(64, 64, device=dev, dtype=dtype, requires_grad=True)
        (w @ w).sum().backward()
    del w
    torch.cuda.synchronize()
    free, _ = torch.cuda.mem_get_info(dev)
    start = outside["start"] if outside else total - free - torch.cuda.memory_reserved(dev)
    torch.cuda.set_per_process_memory_fraction(max(0.0, min(1.0, (card_bytes - start) / total)), dev)
    oom = None
    t0 = time.perf_counter()
    try:
        work(dev)
        torch.cuda.synchronize()
    except torch.OutOfMemoryError as e:
        oom = str(e).splitlines()[0][:300]
    free, _ = torch.cuda.mem_get_info(dev)
    end = outside["end"] if outside else total - free - torch.cuda.memory_reserved(dev)
    held = torch.cuda.max_memory_reserved(dev) + end
    return {
        "ran": oom is None and held <= card_bytes,
        "oom": oom,
        "peak_reserved_bytes": torch.cuda.max_memory_reserved(dev),
        "peak_allocated_bytes": torch.cuda.max_memory_allocated(dev),
        "outside_start_bytes": start,
        "outside_end_bytes": end,
        "held_bytes": held,
        "exclusive": outside is None,
        "seconds": round(time.perf_counter() - t0, 2),
        "device": torch.cuda.get_device_name(dev),
        "gpu_total_bytes": total,
        "torch": torch.__version__,
    }


def train_on(config: dict) -> Callable:
    """The engine's own setup and step (experiments/training/step.py, what Run measures), uninstrumented, for STEPS
    steps at the configuration's batch."""

    def work(dev) -> None:
        from ..core.config import ExperimentConfig
        from ..training.finetune import load_libraries
        from ..training.step import build_state, train_step
        from ..training.strategies import float32_precision

        cfg = ExperimentConfig.from_dict({**config, "device": "cuda", "steps": STEPS, "timing_steps": 0})
        load_libraries(cfg, dev)
        with float32_precision(cfg):
            state = build_state(cfg, dev)
            for step in range(1, cfg.steps + 1):
                train_step(state, step)

    return work


def run_trial(config: dict, card_bytes: int, expandable: bool, outside: dict | None) -> dict:
    """One trial in a fresh process with the allocator setting asked for."""
    arg = {"config": config, "card_bytes": card_bytes, "outside": outside}
    try:
        r = run_module("experiments.measure.boundary", arg, expandable, TRIAL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"ran": None, "error": f"the trial took longer than {TRIAL_TIMEOUT_S} s"}
    lines = r.stdout.strip().splitlines()
    if r.returncode or not lines:
        return {"ran": None, "error": (r.stderr.strip().splitlines() or ["no output"])[-1][:300]}
    return json.loads(lines[-1])


def gpu_total_bytes() -> int:
    """This GPU's memory as the driver reports its total, read in a child process: a CUDA context in the process that
    starts the trials would count, in the first trial, as the trial's own."""
    code = "import torch; print(torch.cuda.mem_get_info()[1])"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return int(r.stdout.strip().splitlines()[-1])


def largest_from(runs: Callable[[int], bool | None], start: int, max_batch: int) -> int | None:
    """The largest batch that runs, searched from `start` (the estimate's answer): start and start+1 first, then steps
    that double up or down, then bisection between the largest that ran and the smallest that did not. 0 if batch 1
    does not run; None where a trial failed for another reason than memory."""
    start = min(max(1, start), max_batch)
    first = runs(start)
    if first is None:
        return None
    if first:
        lo, step = start, 1
        while True:
            up = lo + step
            if up > max_batch:
                hi = max_batch + 1
                break
            ok = runs(up)
            if ok is None:
                return None
            if not ok:
                hi = up
                break
            lo, step = up, step * 2
    else:
        hi, step = start, 1
        while True:
            lo = max(1, hi - step)
            ok = runs(lo)
            if ok is None:
                return None
            if ok:
                break
            if lo == 1:
                return 0
            hi, step = lo, step * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        ok = runs(mid)
        if ok is None:
            return None
        lo, hi = (mid, hi) if ok else (lo, mid)
    return lo


def measure_largest(
    config: dict, card_bytes: int, start: int, expandable: bool, max_batch: int, progress=None, outside=None
) -> dict:
    """The largest batch of `config` that runs on a card of `card_bytes` (emulated on this GPU), searched from the
    estimate's `start`. {"largest_batch", "trials": [{"batch", "ran", ...}], "outside"}. `progress(line)` after each
    trial."""
    trials: dict[int, dict] = {}

    def runs(batch: int) -> bool | None:
        nonlocal outside
        r = run_trial({**config, "batch": batch, "accum": 1}, card_bytes, expandable, outside)
        if outside is None and r.get("ran") is not None:
            outside = {"start": r["outside_start_bytes"], "end": r["outside_end_bytes"]}
        trials[batch] = {"batch": batch, **r}
        if progress is not None:
            progress(trial_line(trials[batch], card_bytes))
        return r.get("ran")

    largest = largest_from(runs, start, max_batch)
    return {
        "largest_batch": largest,
        "expandable": expandable,
        "trials": [trials[b] for b in sorted(trials)],
        "outside": outside,
    }


def trial_line(t: dict, card_bytes: int) -> str:
    if t.get("ran") is None:
        return f"  batch {t['batch']}: failed ({t.get('error')})"
    held = f"held {t['held_bytes'] / GIB:.2f} GiB"
    if t["ran"]:
        return f"  batch {t['batch']}: ran, {held}, {t['seconds']} s"
    if t["oom"]:
        return f"  batch {t['batch']}: out of memory ({t['oom'][:120]})"
    # No error: the allocator gave cached blocks back at its cap, but the process ended up holding more than the card.
    return f"  batch {t['batch']}: did not run, {held}, more than the card's {card_bytes / GIB:.2f} GiB"


if __name__ == "__main__":
    import gc

    a = json.loads(sys.argv[1])
    gc.collect()
    try:
        row = on_card(train_on(a["config"]), a["card_bytes"], a.get("outside"))
    except ValueError as e:  # a card larger than this GPU, a configuration the engine refuses: no trial, one line
        row = {"ran": None, "error": str(e)[:300]}
    print(json.dumps(row))
