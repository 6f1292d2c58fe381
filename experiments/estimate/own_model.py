"""The estimate of a model of one's own (a preset, a Hugging Face architecture, an import path from the command line):
the same replay and allocator model as the built-in families' (experiments/estimate/estimator.py), with every phase
row, the bytes each parameter costs and what a formula would have said beside it; or, where fake tensors cannot
replay the model, a "cannot be predicted" result naming the op and the module."""

from __future__ import annotations

import time

from ..core.config import ExperimentConfig
from ..core.model_sources import parse_source, preset_config
from ..core.vocabulary import TENSOR_CATEGORIES as CATS
from .fast_replay import fast_replay
from .replay import replay
from .unpredictable import CannotPredict

# What the formula calculators assume for mixed-precision Adam: 2 + 2 bytes of bf16/fp16 weights and gradients, 12
# of fp32 master weights and moments. The lesson compares the replay with it.
FORMULA_BYTES_PER_PARAMETER = 16
PERSISTENT = ("parameters", "gradients", "optimizer_state")


def preset_defaults(source: str) -> dict:
    """The levers a preset opens with (batch, seq_len or image_size, precision, optimizer, implementation)."""
    kind, name, size = parse_source(source)
    return preset_config(name, size == "tiny")[1] if kind == "preset" else {}


def cuda_config(cfg: ExperimentConfig) -> ExperimentConfig:
    """torch's default optimizer path when every parameter is on CUDA: foreach (SGD has no state to batch)."""
    if cfg.optimizer_impl == "default" and cfg.optimizer != "sgd":
        return cfg.replace(optimizer_impl="foreach")
    return cfg


def model_estimate(
    cfg: ExperimentConfig, device_type: str = "cuda", spec=None, fast: bool = True, transients: dict | None = None
) -> dict:
    """{"predicted": True, "peak_bytes", "phases", ...} or {"predicted": False, "cannot_predict": {...}}.

    On CUDA the peak is the caching-allocator model's (whole blocks, as max_memory_allocated counts them) and the
    default optimizer path is foreach; `fast`: the 3-4-5-layer replay where it is exact (fast_replay.py);
    `transients`: the kernels' scratch bytes measured on the GPU (experiments/measure/fits.py), CUDA only."""
    t0 = time.perf_counter()
    cuda = device_type == "cuda"
    run_cfg = cuda_config(cfg) if cuda else cfg
    block, transients = (512, transients) if cuda else (1, None)
    try:
        if fast and spec is None:
            r = fast_replay(run_cfg, block=block, transients=transients)
        else:
            r = dict(replay(run_cfg, block=block, spec=spec, transients=transients), path="full")
    except CannotPredict as e:
        return {"predicted": False, "cannot_predict": e.info, "config": cfg.to_dict()}
    marks = r["allocator"]["marks"]
    phases = []
    for p, m in zip(r["phases"], marks, strict=True):
        row = {k: p[k] for k in ("phase", "step", "micro", "allocated_bytes", "peak_bytes")}
        row["allocator_peak_bytes"] = int(m["peak_allocated_bytes"]) if cuda else None
        phases.append(row)
    key = "allocator_peak_bytes" if cuda else "peak_bytes"
    top = max(phases, key=lambda p: p[key])
    categories = {c: int(r["categories"].get(c, 0)) for c in CATS}
    if cuda:
        categories["other"] = max(0, top[key] - sum(categories.values()))
    steady = {c: int(r["steady"].get(c, 0)) for c in CATS}
    count = int(r["parameters"]["count"])
    persistent = sum(steady[c] for c in PERSISTENT)
    return {
        "predicted": True,
        "config": cfg.to_dict(),
        "device_type": device_type,
        "optimizer_impl": run_cfg.optimizer_impl,
        "peak_bytes": int(top[key]),
        "peak_phase": {"phase": top["phase"], "step": top["step"]},
        "reserved_bytes": r["allocator"]["peak_reserved_bytes"] if cuda else None,
        "categories": categories,
        "steady": steady,
        "phases": phases,
        "parameters": count,
        "parameter_dtypes": r["parameters"]["dtypes"],
        # Parameters, gradients and optimizer state after a step, per parameter: 8 for pure bf16 Adam, 16 for AMP.
        "bytes_per_parameter": persistent / count if count else None,
        "formula_bytes": FORMULA_BYTES_PER_PARAMETER * count,
        "signatures": r["signatures"],
        "neutralised": r["neutralised"],
        "path": r["path"],
        "seconds": round(time.perf_counter() - t0, 3),
    }
