"""One boundary trial on an emulated card, in its own process, and the grid of trials that share one GPU
(benchmarks/fits_boundary.py drives them).

A card of C bytes is emulated on a larger GPU: in a fresh process, after CUDA and cuBLAS have started, the allocator
may hold what the card would leave it, C less what the process already holds outside the allocator
(`set_per_process_memory_fraction`); the plain training loop then runs two steps (the optimizer state appears in step
1, and most failures come in step 2). A trial "runs" when no out-of-memory error was raised and the most the process
held (the allocator's reserved peak plus what it holds outside it at the end: the CUDA context grows as kernels load)
is within C.

Trials share the GPU: each takes its card's bytes of the real one first. What a process holds outside the allocator
is read from the driver's free memory, which counts every process, so each cell's first trial (batch 1) has the GPU
to itself and measures it; the cell's other trials use its figures, and so do the cells of the same model and levers
on other cards (the card changes the allocator's limit, not the CUDA context or the kernels loaded) once a batch-1
trial of theirs has run to the end (one that ran out of memory early loaded fewer kernels).

    python benchmarks/boundary_trial.py '{"params": {...}, "card_bytes": N, "expandable": false, "outside": null}'
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def config(preset: str, levers: dict, batch: int | None = None):
    """A cell's configuration. `preset` is a preset's name, a model source (hf:TYPE:HEAD, torchvision:NAME), or
    "builtin" for the built-in families; `levers` may set any configuration field (model, layers, seq_len,
    model_overrides...), so a cell can be a model the repository has no preset of."""
    from experiments.core.config import ExperimentConfig
    from experiments.estimate.estimator import preset_defaults

    source = "" if preset == "builtin" else preset if ":" in preset else f"preset:{preset}"
    data = {
        **(preset_defaults(source) if source else {}),
        "model_source": source,
        **levers,
        "device": "cuda",
        "steps": 2,
    }
    data["timing_steps"] = 0
    if batch is not None:
        data["batch"] = batch
    return ExperimentConfig.from_dict(data)


def config_of(text: str):
    """`config` from JSON fields: a grid row's configuration, or a preset's ({"model_source": "preset:resnet50",
    "batch": 143, ...}), the preset's own fields under the ones given."""
    data = json.loads(text)
    return config(data.pop("model_source", "") or "builtin", data)


# ---------------------------------------------------------------------------------------------- one trial, its own process


def plain_steps(cfg, dev) -> None:
    """cfg's steps as a user's own loop runs them (model_presets' plain loop): no tracker, no phase recorder, the whole
    batch at once (no accumulation)."""
    import torch
    from model_presets import plain_loop, plain_step  # the same plain loop as the preset benchmark (this folder)

    with plain_loop(cfg, dev) as (spec, model, opt, batch, amp):
        scaler = torch.amp.GradScaler("cuda") if cfg.precision == "amp_fp16" else None
        for _step in range(cfg.steps):
            plain_step(cfg, spec, model, opt, scaler, batch, amp, "cuda")


def trial(params: dict, card_bytes: int, expandable: bool, outside: dict | None = None) -> dict:
    """Runs in a fresh process (the allocator setting is read when CUDA starts): the plain loop a user writes, for two
    steps, on the card emulated as "What fits --measure" emulates it (experiments/measure/boundary.py). `outside`: what
    the process holds outside the allocator, at the start and the end, from a trial of the same cell that had the GPU
    to itself; without it the trial measures it from the driver's free memory, which is only right while no other
    process uses the GPU."""
    from experiments.measure.boundary import on_card

    cfg = config(params["preset"], params["levers"], params["batch"])
    row = on_card(lambda dev: plain_steps(cfg, dev), card_bytes, outside)
    return dict(row, transformers=version("transformers"))  # a model's code changes between its releases


def version(package: str) -> str | None:
    """An installed package's release, or None."""
    import importlib.metadata

    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


class GpuMemory:
    """The GPU's memory shared by the trials running at once: a trial takes its card's bytes before it starts, so
    emulated cards never overlap on the real one. First come, first served: a trial of a large card is not starved
    by a stream of small ones behind it."""

    def __init__(self, total: int):
        self.total = self.free = total
        self.cond = threading.Condition()
        self.queue = collections.deque()

    def __call__(self, nbytes: int):
        return _Held(self, nbytes)


class _Held:
    def __init__(self, pool: GpuMemory, nbytes: int):
        self.pool, self.nbytes = pool, nbytes

    def __enter__(self):
        pool = self.pool
        with pool.cond:
            pool.queue.append(self)
            pool.cond.wait_for(lambda: pool.queue[0] is self and pool.free >= self.nbytes)
            pool.queue.popleft()
            pool.free -= self.nbytes
            pool.cond.notify_all()

    def __exit__(self, *exc):
        with self.pool.cond:
            self.pool.free += self.nbytes
            self.pool.cond.notify_all()


MAX_SEARCHED = 65536


class OutOfTime(Exception):
    pass


def child(params: dict, card_bytes: int, expandable: bool, outside: dict | None = None) -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="2")
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    if expandable:
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    arg = json.dumps({"params": params, "card_bytes": card_bytes, "expandable": expandable, "outside": outside})
    r = subprocess.run([sys.executable, __file__, arg], capture_output=True, text=True, env=env, timeout=600)
    if r.returncode:
        return {"ran": False, "error": (r.stderr.strip().splitlines() or ["?"])[-1][:300]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def cell_key(cell: dict) -> str:
    return json.dumps([cell["preset"], cell["card"], cell["levers"]], sort_keys=True)


def levers_key(cell: dict) -> str:
    return json.dumps([cell["preset"], cell["levers"]], sort_keys=True)


def trial_key(cell: dict, expandable: bool, batch: int) -> str:
    return json.dumps([cell["preset"], cell["card"], cell["levers"], expandable, batch], sort_keys=True)


class Grid:
    """The trials of a run: those done (read back from --out), the GPU's memory, the deadline, and per cell what its
    process holds outside the allocator (measured once, by a batch-1 trial with the GPU to itself)."""

    def __init__(self, done: dict, write, gpu, deadline: float):
        self.done, self.write, self.gpu, self.deadline = done, write, gpu, deadline
        self.outside: dict[str, dict | None] = {}  # by cell, and by model and levers where a batch-1 trial ran
        self.locks: dict[str, threading.Lock] = collections.defaultdict(threading.Lock)
        for row in done.values():
            if row.get("exclusive") and "outside_start_bytes" in row:
                figures = {"start": row["outside_start_bytes"], "end": row["outside_end_bytes"]}
                self.outside[cell_key(row)] = figures
                if row["ran"]:
                    self.outside[levers_key(row)] = figures

    def _run(self, cell: dict, expandable: bool, batch: int, outside: dict | None) -> None:
        k = trial_key(cell, expandable, batch)
        if time.monotonic() > self.deadline:
            raise OutOfTime
        params = {"preset": cell["preset"], "levers": cell["levers"], "batch": batch}
        nbytes = self.gpu.total if outside is None else min(cell["card_bytes"], self.gpu.total)
        with self.gpu(nbytes):
            r = child(params, cell["card_bytes"], expandable, outside)
        self.done[k] = dict(
            r,
            key=k,
            card=cell["card"],
            preset=cell["preset"],
            levers=cell["levers"],
            batch=batch,
            expandable=expandable,
            card_bytes=cell["card_bytes"],
        )
        self.write(self.done[k])

    def _outside(self, cell: dict) -> dict:
        ck, lk = cell_key(cell), levers_key(cell)
        with self.locks[lk]:
            if ck not in self.outside and lk in self.outside:
                self.outside[ck] = self.outside[lk]
            if ck not in self.outside:
                self._run(cell, False, 1, None)
                r = self.done[trial_key(cell, False, 1)]
                ok = "outside_start_bytes" in r
                self.outside[ck] = {"start": r["outside_start_bytes"], "end": r["outside_end_bytes"]} if ok else None
                if ok and r["ran"]:
                    self.outside[lk] = self.outside[ck]
        if self.outside[ck] is None:
            raise OutOfTime  # the cell's first trial failed for another reason than memory: nothing to bisect
        return self.outside[ck]

    def runs(self, cell: dict, expandable: bool, batch: int) -> bool:
        k = trial_key(cell, expandable, batch)
        if k not in self.done:
            outside = self._outside(cell)
            if k not in self.done:  # (the cell's first trial may have been this one)
                self._run(cell, expandable, batch, outside)
        return self.done[k]["ran"]

    def boundary(self, cell: dict, expandable: bool) -> int:
        """The largest batch that runs, searched from the answer as `fits --measure` searches it."""
        from experiments.measure.boundary import largest_from

        start = max(1, cell["answer"]["expandable" if expandable else "default"])
        return largest_from(lambda b: self.runs(cell, expandable, b), start, MAX_SEARCHED)


if __name__ == "__main__":
    import gc

    a = json.loads(sys.argv[1])
    gc.collect()
    print(json.dumps(trial(a["params"], a["card_bytes"], a["expandable"], a.get("outside"))))
