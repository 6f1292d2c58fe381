"""The memory estimate of a configuration before it runs: its training step replayed on fake tensors
(experiments/estimate/replay.py), setup and two steps (the first allocates the optimizer state lazily), in the order
autograd runs them. Exact on a CPU. For CUDA every storage is rounded to the caching allocator's 512-byte blocks and
the trace goes through a model of the allocator (experiments/estimate/allocator_model.py), which counts whole blocks
as `memory_allocated` does; CUDA's default optimizer path is taken, and the kernels' scratch memory measured on the
device (experiments/estimate/workspaces.py) is held where its op runs.
"""

from __future__ import annotations

from ..core.capacity import verdict
from ..core.config import ExperimentConfig
from ..core.vocabulary import TENSOR_CATEGORIES as CATS
from .explain import terms
from .fast_replay import fast_replay
from .replay import replay

METHODS = ("auto", "replay", "replay_device")


def estimate(
    cfg: ExperimentConfig,
    capacity_bytes: int | None = None,
    device_type: str = "cuda",
    method: str = "auto",
    transients: dict[str, tuple[int, ...]] | None = None,
    spec=None,
) -> dict:
    """The peak a run of cfg reaches on `device_type`, with the categories at that moment and their explanation.

    `spec`: the model where cfg does not name it (an import path, from the command line). Raises CannotPredict
    (experiments/estimate/unpredictable.py) for what fake tensors cannot replay.
    method "replay" (or "auto") traces the real training step on fake CPU tensors; "replay_device" dispatches as
    CUDA does (a CUDA build only, in the worker process).
    `transients`: the kernels' scratch allocations per op signature, measured on the device. A convolution
    whose signature is missing is listed in "unmeasured", and "not_predicted" says its workspace is not in the
    figure.
    """
    if method not in METHODS:
        raise ValueError(f"method: got {method!r}; allowed: {', '.join(METHODS)}")
    method = "replay" if method == "auto" else method
    asked = cfg
    cuda = device_type == "cuda"
    if cuda and cfg.optimizer_impl == "default" and cfg.optimizer != "sgd":
        cfg = cfg.replace(optimizer_impl="foreach")  # torch's default for parameters that are all on CUDA
    block = 512 if cuda else 1
    if cfg.model_source and spec is None and method == "replay":
        # A deep model of one's own from 3-, 4- and 5-layer replays where that is exact (else the full replay).
        r = fast_replay(cfg, block=block, transients=transients if cuda else None)
    else:
        fake_device = "cuda" if cuda and method == "replay_device" else "cpu"
        r = replay(cfg, block=block, fake_device=fake_device, transients=transients if cuda else None, spec=spec)
    categories = {c: int(r["categories"].get(c, 0)) for c in CATS}
    peak, phase, reserved, unmeasured = int(r["peak_bytes"]), r["peak_phase"], None, []
    if cuda:
        # The allocator counts whole blocks: the peak and its phase come from the model's replay of the trace.
        peak, i = allocator_peak(r)
        phase = r["phases"][i]["phase"]
        categories["other"] = max(0, peak - sum(categories.values()))
        reserved = r["allocator"]["peak_reserved_bytes"]
        unmeasured = [s for s in r["signatures"] if s not in (transients or {})]
    # Every phase's row (on CUDA the allocator's whole blocks), as a measured run's phases are charted.
    rows = [{k: p[k] for k in ("phase", "step", "micro", "allocated_bytes", "peak_bytes")} for p in r["phases"]]
    if cuda:
        for row, mark in zip(rows, r["allocator"]["marks"], strict=True):
            row["peak_bytes"] = int(mark["peak_allocated_bytes"])
    return {
        "categories": categories,
        "phases": rows,
        "steady": {c: int(r["steady"].get(c, 0)) for c in CATS},
        "peak_bytes": peak,
        "peak_phase": phase,
        "terms": terms(asked, r, categories),
        **verdict(peak, capacity_bytes),
        "method": method,
        "device_type": device_type,
        "step": r["step"],
        # What the caching allocator would reserve for these tensors (experiments/estimate/allocator_model.py).
        "reserved_bytes": reserved,
        "signatures": r["signatures"] if cuda else [],
        "unmeasured": unmeasured,
        "not_predicted": ["cudnn_workspace"] if unmeasured else [],
    }


def allocator_peak(r: dict) -> tuple[int, int]:
    """(the caching-allocator model's peak allocated bytes, the index of the phase it falls in) of a replay."""
    marks = r["allocator"]["marks"]
    i = max(range(len(marks)), key=lambda k: marks[k]["peak_allocated_bytes"])
    return int(marks[i]["peak_allocated_bytes"]), i
