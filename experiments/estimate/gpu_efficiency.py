"""How far a real GPU training step of each model family and precision stays from its roofline, measured once per
worker (experiments/estimate/calibration.py).

A GPU step's arithmetic is divided by a large matmul's rate, but a CNN's convolutions with tens of channels, its
batch norms and activations in NCHW reach a fraction of it: on an NVIDIA H100 such steps ran 2.2 to 3.7 times
their roofline in TF32 and bf16, and 1.6 to 2.1 times in strict fp32, where cuDNN's Winograd kernels make up for
the slow fp32 rate (docs/engine.md, "Step time"). So each family's step is timed in every precision at a batch
where its arithmetic, not the host's dispatch, sets the time (the work at least DISPATCH_MARGIN times the
dispatch, within MAX_PEAK of memory), and its time over the predicted work is the factor the prediction scales
the work by (steptime.predict_step_ms). A family or precision whose probe stays launch-bound, fails or is not
supported keeps a factor of 1. About 20 s on an H100, once per GPU model and library versions: the worker keeps the
table in its cache folder (workspaces.cache_path), so a restarted worker takes jobs without measuring again."""

from __future__ import annotations

import hashlib
import json
import math

import torch

from ..core.config import PRECISIONS, ExperimentConfig
from ..core.units import GIB
from ..training.step import build_state, train_step
from ..training.strategies import float32_precision
from .estimator import estimate
from .steptime import predict_step_ms
from .throughput import sig, timed
from .workspaces import cache_path

# Small steps of each family; the batch is scaled up from these until the arithmetic dominates.
PROBES = {
    "mlp": {"layers": 2, "width": 2048, "batch": 64},
    "cnn": {"model": "cnn", "layers": 3, "width": 64, "image_size": 32, "batch": 8},
    "transformer": {"model": "transformer", "layers": 2, "width": 1024, "heads": 16, "seq_len": 256, "batch": 1},
}
DISPATCH_MARGIN = 2.0
MAX_PEAK = 4 * GIB  # and a quarter of the GPU's free memory, on a small card
MAX_SCALE = 1024


def _config(family: str, precision: str, batch: int | None = None) -> ExperimentConfig:
    probe = dict(PROBES[family], precision=precision, optimizer="adam", device="cuda")
    if batch is not None:
        probe["batch"] = batch
    return ExperimentConfig(**probe)


def _predicted(cfg: ExperimentConfig, rates: dict) -> tuple[dict, int]:
    est = estimate(cfg, device_type="cuda")
    step = predict_step_ms(est["step"], rates, cfg.precision, "cuda", model=cfg.model)
    return step, int(est["peak_bytes"])


def probe_batch(family: str, rates: dict, max_peak: int = MAX_PEAK, predicted=_predicted) -> int:
    """The batch at which every precision does DISPATCH_MARGIN times its dispatch in arithmetic, within
    `max_peak` in every precision (a step's work and its activations grow with the batch, from two batches;
    its weights and its dispatch do not)."""
    base = PROBES[family]["batch"]
    wanted, allowed = 1, MAX_SCALE
    for precision in PRECISIONS:
        (one, peak_one), (two, peak_two) = (predicted(_config(family, precision, base * k), rates) for k in (1, 2))
        work = [s["compute_ms"] + s["memory_ms"] for s in (one, two)]
        per_base = work[1] - work[0]  # the work of `base` more samples
        if per_base > 0:
            wanted = max(wanted, math.ceil((DISPATCH_MARGIN * one["dispatch_ms"] - work[0]) / per_base + 1))
        grows = peak_two - peak_one
        if grows > 0:
            allowed = min(allowed, max(1, 1 + (max_peak - peak_one) // grows))
    batch = base * min(wanted, allowed)
    # Past the first batches a step's peak moves from the optimizer's state to the activations: checked where it is.
    while batch > base and predicted(_config(family, "fp32", batch), rates)[1] > max_peak:
        batch = max(base, batch // 2)
    return batch


def measure(device: torch.device, rates: dict, families=tuple(PROBES)) -> dict[str, dict[str, float]]:
    """{family: {precision: measured step time / predicted work}} on this GPU (see the module's docstring)."""
    out: dict[str, dict[str, float]] = {}
    max_peak = min(MAX_PEAK, torch.cuda.mem_get_info(device)[0] // 4)
    for family in families:
        batch = probe_batch(family, rates, max_peak=max_peak)
        for precision in PRECISIONS:
            cfg = _config(family, precision, batch)
            step, _ = _predicted(cfg, rates)
            work = step["compute_ms"] + step["memory_ms"]
            if work < DISPATCH_MARGIN * step["dispatch_ms"]:
                continue  # launch-bound at the largest batch allowed: its time says nothing of the kernels
            try:
                state = build_state(cfg, device)
                with float32_precision(cfg):
                    seconds = timed(lambda state=state: train_step(state), device, 3)
            except (RuntimeError, torch.OutOfMemoryError):  # a precision this GPU lacks, a card too small
                continue
            finally:
                state = None
                torch.cuda.empty_cache()
            out.setdefault(family, {})[precision] = sig(seconds * 1e3 / work)
    return out


def cached(device: torch.device, rates: dict, path=None) -> dict[str, dict[str, float]]:
    """measure(), from the cache file of this GPU model and these probes where one exists."""
    probes = hashlib.sha256(json.dumps([PROBES, DISPATCH_MARGIN, MAX_PEAK], sort_keys=True).encode()).hexdigest()[:12]
    path = path or cache_path(torch.cuda.get_device_name(device), f"gpu-efficiency-{probes}")
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        pass
    table = measure(device, rates)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(table))
        tmp.replace(path)
    except OSError:  # a read-only home: measured again at the next start
        pass
    return table
