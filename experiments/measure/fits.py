"""Before anything is allocated: does a configuration fit? Its estimate against the capacity (the learner's budget,
the device's free memory, the operator's limit), with the device's cuDNN workspaces measured where the estimate
names them. Runs, profiles, gradient checks and leak runs are refused here, not killed half-way."""

from __future__ import annotations

import gc

import torch

from ..core.capacity import capacity, cpu_free_for_tensors, process_margin_bytes
from ..core.config import ExperimentConfig
from ..core.errors import WouldNotFit
from ..core.limits import load as load_limits
from ..core.units import GIB, MIB, fmt_gib
from ..estimate import workspaces as op_workspace
from ..estimate.estimator import estimate
from ..estimate.unpredictable import CannotPredict
from .device import cpu_available_bytes, resolve_device

# A run is refused up front only when the estimate is this far past the capacity, so runs near
# the limit are still tried and an out-of-memory error becomes a result the learner can study.
REFUSE_FACTOR = 1.15


def measure_workspaces(signatures: list[str], device: torch.device) -> dict[str, tuple[int, ...]]:
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
    if (
        not isinstance(signatures, list)
        or len(signatures) > 500
        or not all(op_workspace.is_signature(s) for s in signatures)
    ):
        raise ValueError("signatures: a list of at most 500 op signatures from the estimate")
    device = resolve_device("auto")
    if device.type != "cuda":
        return {"measured": 0}
    return {"measured": len(measure_workspaces(signatures, device))}


def _device_free(device: torch.device) -> tuple[int, int]:
    """(what the driver has free on the GPU, what this process's allocator holds cached and unused)."""
    free, _total = torch.cuda.mem_get_info(device)
    return free, torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)


def capacity_bytes(cfg: ExperimentConfig, device: torch.device) -> int | None:
    if device.type == "cuda":
        return capacity(cfg.budget_mb, *_device_free(device))
    return capacity(cfg.budget_mb, cpu_free_for_tensors(cpu_available_bytes()))


def unpredicted(cfg: ExperimentConfig, device: torch.device, e: CannotPredict) -> dict:
    """A model the estimate cannot predict runs only when forced, labelled as having no estimate, within the checks
    that need none: on CUDA the allocator's own out-of-memory error (never past the operator's per-run limit, which
    only an estimate can check); on a CPU the tracker's simulated one at the machine's free memory less the worker's
    margin (past it the system would kill the worker)."""
    if not cfg.force or load_limits().max_peak_gib is not None:
        raise e
    budget = None
    if device.type == "cpu":
        budget = cpu_free_for_tensors(cpu_available_bytes())
        if cfg.budget_mb is not None:
            budget = min(budget, int(cfg.budget_mb * MIB))
    return {"predicted": False, "cannot_predict": e.info, "peak_bytes": None, "categories": {}, "run_budget": budget}


def check_fits(cfg: ExperimentConfig, device: torch.device, copies: int = 1, spec=None) -> tuple[int | None, dict]:
    """Refuse a configuration whose estimate is far past the capacity (runs, profiles and gradient checks alike:
    on a CPU an unchecked one is killed by the OOM killer, worker and all). `copies`: states alive at once."""
    capacity = capacity_bytes(cfg, device)
    try:
        est = estimate(cfg, capacity_bytes=capacity, device_type=device.type, spec=spec)
    except CannotPredict as e:
        return capacity, unpredicted(cfg, device, e)
    if est["unmeasured"]:
        est = estimate(
            cfg,
            capacity_bytes=capacity,
            device_type=device.type,
            transients=measure_workspaces(est["signatures"], device),
            spec=spec,
        )
    need = copies * est["peak_bytes"]
    cap = load_limits().max_peak_gib
    if cap is not None and need > cap * GIB:
        # The operator's limit: "force" (or a shared link that sets it) cannot lift it.
        raise WouldNotFit(
            f"estimated peak {fmt_gib(need)} is above this server's limit of {cap:g} GiB per run (max_peak_gib)",
            est,
            "max_peak_gib",
            peak_bytes=need,
            limit_bytes=int(cap * GIB),
        )
    if device.type == "cuda":
        beside_the_allocator(est, need, device, copies)
    host = cpu_available_bytes() if device.type == "cpu" else None
    margin = process_margin_bytes(need)
    # A budget whose use still leaves the worker's own margin free makes the tracker raise a simulated
    # out-of-memory error: on a CPU, the way to teach one.
    budget = None if cfg.budget_mb is None else cfg.budget_mb * MIB
    simulated = budget is not None and host is not None and budget + process_margin_bytes(budget) < host
    if host is not None and not simulated and need + margin > host:
        # On a CPU nothing reports an out-of-memory error: the system kills the process, worker and all. So no
        # slack past the free memory here, forced or not, and the worker's own growth during a run counts.
        raise WouldNotFit(
            f"estimated peak {fmt_gib(need)} plus the {fmt_gib(margin)} the worker process itself needs during a run "
            f"does not fit the {fmt_gib(host)} of memory this machine has free; on a CPU, running past it is stopped "
            "by the system, not reported: reduce batch, width or layers, or set budget_mb below the free memory to "
            "see a simulated out-of-memory error",
            est,
            "host_memory",
            peak_bytes=need + margin,
            available_bytes=host,
        )
    if not cfg.force and capacity is not None and need > REFUSE_FACTOR * capacity:
        raise WouldNotFit(
            f"estimated peak {fmt_gib(need)} does not fit the {fmt_gib(capacity)} available on {device.type}; "
            "reduce batch, width or layers, or force the run to see the out-of-memory error",
            est,
            "capacity",
            peak_bytes=need,
            available_bytes=capacity,
        )
    return capacity, est


def beside_the_allocator(est: dict, need: int, device: torch.device, copies: int = 1) -> None:
    """What a CUDA run takes outside PyTorch's allocator, refused forced or not. A paged optimizer's state is CUDA
    managed memory: asked past what the GPU has free, it can stall the GPU for every process on it, which no
    out-of-memory error reports. Offloaded activations are pinned host memory, which the system cannot swap out: past
    the machine's free memory the worker is killed."""
    paged = copies * int(est.get("paged_bytes") or 0)
    if paged:
        free = sum(_device_free(device))
        if need + paged > free:
            raise WouldNotFit(
                f"the paged optimizer's state ({fmt_gib(paged)}, CUDA managed memory) beside the estimated peak "
                f"{fmt_gib(need)} is past the {fmt_gib(free)} this GPU has free; managed memory asked past that can "
                "stall the GPU for every process on it, so this is refused even when forced: lower the batch or the "
                "sequence, or take a non-paged optimizer",
                est,
                "paged_memory",
                peak_bytes=need + paged,
                available_bytes=free,
            )
    pinned = copies * int(est.get("host_peak_bytes") or 0)
    if pinned:
        host = cpu_available_bytes()
        if pinned + process_margin_bytes(pinned) > host:
            raise WouldNotFit(
                f"the offloaded activations ({fmt_gib(pinned)} of pinned host memory) do not fit the "
                f"{fmt_gib(host)} of memory this machine has free; pinned memory cannot be swapped out, and past it "
                "the system stops the run: lower the batch or the sequence, or checkpoint instead of offloading",
                est,
                "pinned_memory",
                peak_bytes=pinned,
                available_bytes=host,
            )
