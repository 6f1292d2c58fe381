"""The one memory estimate of a configuration before it runs, for every model source (built-in families, presets,
Hugging Face types, import paths) and device: its training step replayed on fake tensors
(experiments/estimate/replay.py), setup and two steps (the first allocates the optimizer state lazily), in the order
autograd runs them. Exact on a CPU. For CUDA every storage is rounded to the caching allocator's 512-byte blocks and
the trace goes through a model of the allocator (experiments/estimate/allocator_model.py), which counts whole blocks
as `memory_allocated` does; CUDA's default optimizer path is taken, and the kernels' scratch memory measured on the
device (experiments/estimate/workspaces.py) is held where its op runs. The estimate box, "Run for real", `fits`, the
command line and the class's estimate processes all read this one result.

Known limitations (docs/engine.md lists each with its cost): memory that depends on the data's values or on chance
(`.item()`, `nonzero`, LayerDrop) is named as not predictable, with the op and the module, never guessed; kernels'
scratch memory on a GPU is included only once measured there; the allocator model covers the default allocator and
expandable segments, not other PYTORCH_CUDA_ALLOC_CONF settings; the CUDA context, NCCL's buffers, paged optimizer
state and offloaded activations are outside the allocated peak (the last two given apart); step time is a range.
"""

from __future__ import annotations

import time
from typing import TypedDict

from ..core.capacity import verdict
from ..core.config import ExperimentConfig
from ..core.finetune import BNB_OPTIMIZERS, check_device, check_installed
from ..core.model_sources import preset_defaults  # noqa: F401 - its callers import it from here
from ..core.vocabulary import TENSOR_CATEGORIES as CATS
from .explain import terms
from .fast_replay import fast_replay
from .replay import replay
from .unpredictable import CannotPredict
from .workspaces import missing, uncounted

METHODS = ("auto", "replay", "replay_device")
# What the formula calculators assume for mixed-precision Adam: 2 + 2 bytes of bf16/fp16 weights and gradients, 12
# of fp32 master weights and moments. "Your model" compares the replay with it.
FORMULA_BYTES_PER_PARAMETER = 16
PERSISTENT = ("parameters", "gradients", "optimizer_state")


class Estimate(TypedDict, total=False):
    predicted: bool  # False: "cannot_predict" says which op of which module (then only "config" besides)
    config: dict
    device_type: str
    optimizer_impl: str  # the path the replay took (CUDA's default is foreach)
    peak_bytes: int  # on CUDA the caching allocator's whole blocks, as max_memory_allocated counts them
    peak_phase: str
    peak_step: int
    reserved_bytes: int | None
    reserved_why: str | None  # a key of core.vocabulary.RESERVED_WHY where reserved_bytes is None
    # A paged optimizer's state in CUDA managed memory: outside the caching allocator (in neither figure above), paged
    # to host memory by the driver under pressure. 0 on a CPU, where bitsandbytes does not page.
    paged_bytes: int
    # Host memory off the device's books at its peak: that paged state, and the activations offloaded to pinned host
    # memory (offload_activations), in the host allocator's power-of-two blocks. Shown beside device memory, never
    # added to it.
    host_peak_bytes: int
    categories: dict  # at the peak
    steady: dict  # after a step
    phases: list  # {"phase", "step", "micro", "allocated_bytes", "peak_bytes"} per phase
    terms: list
    parameters: int
    trainable_parameters: int  # those with gradients (LoRA's adapters; every parameter in full training)
    parameter_dtypes: list
    bytes_per_parameter: float | None
    formula_bytes: int
    step: dict  # the step's work, for the step-time prediction
    signatures: list
    unmeasured: list
    not_predicted: list
    neutralised: dict | None
    path: str
    method: str
    seconds: float
    cannot_predict: dict


def cuda_config(cfg: ExperimentConfig) -> ExperimentConfig:
    """torch's default optimizer path when every parameter is on CUDA: foreach (SGD has no state to batch; bitsandbytes'
    optimizers have their own kernels)."""
    if cfg.optimizer_impl == "default" and cfg.optimizer not in ("sgd", *BNB_OPTIMIZERS):
        return cfg.replace(optimizer_impl="foreach")
    return cfg


def estimate(
    cfg: ExperimentConfig,
    capacity_bytes: int | None = None,
    device_type: str = "cuda",
    method: str = "auto",
    transients: dict[str, tuple[int, ...]] | None = None,
    spec=None,
    fast: bool = True,
) -> Estimate:
    """The peak a run of cfg reaches on `device_type`, per phase and per category, with its explanation.

    `spec`: the model where cfg does not name it (an import path, from the command line). Raises CannotPredict
    (experiments/estimate/unpredictable.py) for what fake tensors cannot replay (`estimate_or_refusal` returns it).
    method "replay" (or "auto") traces the real training step on fake CPU tensors; "replay_device" dispatches as
    CUDA does (a CUDA build only, in the worker process). `fast`: a deep model of one's own from 3-, 4- and 5-layer
    replays where that is exact (fast_replay.py), else the full replay.
    `transients`: the kernels' scratch allocations per op signature, measured on the device. A convolution
    whose signature is missing is listed in "unmeasured", and "not_predicted" says its workspace is not in the
    figure.
    """
    if method not in METHODS:
        raise ValueError(f"method: got {method!r}; allowed: {', '.join(METHODS)}")
    if method == "replay_device" and device_type == "cuda" and cfg.optimizer in BNB_OPTIMIZERS:
        # bitsandbytes' CUDA kernels read their tensors' memory: a fake tensor's pointer made an illegal memory access
        # on an H100 and lost the process's CUDA context (docs/engine.md, the 2026-12-07 re-check).
        raise ValueError(f"method: replay_device cannot replay bitsandbytes' {cfg.optimizer}; use replay")
    t0 = time.perf_counter()
    check_device(cfg, device_type)
    check_installed(cfg)
    method = "replay" if method == "auto" else method
    cuda = device_type == "cuda"
    run_cfg = cuda_config(cfg) if cuda else cfg
    block, transients = (512, transients) if cuda else (1, None)
    if fast and cfg.model_source and spec is None and method == "replay":
        r = fast_replay(run_cfg, block=block, transients=transients)
    else:
        fake_device = "cuda" if cuda and method == "replay_device" else "cpu"
        r = replay(run_cfg, block=block, fake_device=fake_device, transients=transients, spec=spec)
        r = dict(r, path="full")
    # Every phase's row, as a measured run's phases are charted; on CUDA the allocator's whole blocks.
    rows = [{k: p[k] for k in ("phase", "step", "micro", "allocated_bytes", "peak_bytes")} for p in r["phases"]]
    if cuda:
        for row, mark in zip(rows, r["allocator"]["marks"], strict=True):
            row["peak_bytes"] = int(mark["peak_allocated_bytes"])
    top = max(rows, key=lambda p: p["peak_bytes"])
    categories = {c: int(r["categories"].get(c, 0)) for c in CATS}
    if cuda:
        categories["other"] = max(0, top["peak_bytes"] - sum(categories.values()))
    steady = {c: int(r["steady"].get(c, 0)) for c in CATS}
    count = int(r["parameters"]["count"])
    persistent = sum(steady[c] for c in PERSISTENT)
    reserved = r["allocator"]["peak_reserved_bytes"] if cuda else None
    unmeasured = missing(r["signatures"], transients) if cuda else []
    return Estimate(
        predicted=True,
        config=cfg.to_dict(),
        device_type=device_type,
        optimizer_impl=run_cfg.optimizer_impl,
        peak_bytes=int(top["peak_bytes"]),
        peak_phase=top["phase"],
        peak_step=top["step"],
        reserved_bytes=reserved,
        paged_bytes=int(r["paged_bytes"]),
        host_peak_bytes=int(r["host_peak_bytes"]),
        reserved_why=None if reserved is not None else ("extrapolated" if cuda else "cpu"),
        categories=categories,
        steady=steady,
        phases=rows,
        terms=terms(cfg, r, categories),
        parameters=count,
        trainable_parameters=int(r["parameters"]["trainable"]),
        parameter_dtypes=list(r["parameters"]["dtypes"]),
        # Parameters, gradients and optimizer state after a step, per parameter: 8 for pure bf16 Adam, 16 for AMP.
        bytes_per_parameter=persistent / count if count else None,
        formula_bytes=FORMULA_BYTES_PER_PARAMETER * count,
        step=r["step"],
        signatures=r["signatures"] if cuda else [],
        unmeasured=unmeasured,
        not_predicted=["cudnn_workspace"] if cuda and uncounted(r["signatures"], transients) else [],
        neutralised=r.get("neutralised"),
        path=r["path"],
        method=method,
        seconds=round(time.perf_counter() - t0, 3),
        **verdict(int(top["peak_bytes"]), capacity_bytes),
    )


def estimate_or_refusal(cfg: ExperimentConfig, **kwargs) -> Estimate:
    """estimate(), or where fake tensors cannot replay the model {"predicted": False, "cannot_predict": {...}}."""
    try:
        return estimate(cfg, **kwargs)
    except CannotPredict as e:
        return Estimate(predicted=False, cannot_predict=e.info, config=cfg.to_dict())


def allocator_peak(r: dict) -> tuple[int, int]:
    """(the caching-allocator model's peak allocated bytes, the index of the phase it falls in) of a replay."""
    marks = r["allocator"]["marks"]
    i = max(range(len(marks)), key=lambda k: marks[k]["peak_allocated_bytes"])
    return int(marks[i]["peak_allocated_bytes"]), i
