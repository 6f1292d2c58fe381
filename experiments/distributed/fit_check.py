"""Before a data-parallel launch: does every rank fit? The per-rank estimate against each rank's device (each GPU's
free memory), or, on a CPU, all the ranks together against the machine's free memory, since gloo ranks share it.

Unchecked, one shared link with world size 8 and a model no rank can hold started 8 processes that the system's
OOM killer stopped one by one (exit 0, nothing learned, and the class's server short of memory meanwhile).
"""

from __future__ import annotations

from ..core.capacity import process_margin_bytes
from ..core.limits import load as load_limits
from ..core.units import GIB, fmt_gib
from ..measure.device import cpu_available_bytes
from ..measure.fits import REFUSE_FACTOR, WouldNotFit


def gpu_free_bytes(world: int) -> list[int]:
    import torch

    return [torch.cuda.mem_get_info(i)[0] for i in range(world)]


def check_ranks_fit(dcfg, est: dict, device_type: str) -> None:
    """Raises WouldNotFit (code "max_peak_gib", "host_memory" or "capacity", figures in bytes) naming why."""
    peak, world = int(est["peak_bytes"]), dcfg.world_size
    cap = load_limits().max_peak_gib
    if cap is not None and peak > cap * GIB:
        raise WouldNotFit(
            f"estimated peak per rank {fmt_gib(peak)} is above this server's limit of {cap:g} GiB per run "
            "(max_peak_gib)",
            est,
            "max_peak_gib",
            peak_bytes=peak,
            limit_bytes=int(cap * GIB),
        )
    if device_type == "cpu":
        host = cpu_available_bytes()
        # Every rank is a process of its own: its interpreter and torch count beside its tensors. No force: on a
        # CPU running past the memory is a kill by the system, not an error a learner can read.
        need = world * (peak + process_margin_bytes(peak, fresh=True))
        if host is not None and need > host:
            raise WouldNotFit(
                f"{world} ranks need about {fmt_gib(need)} together (estimated {fmt_gib(peak)} of tensors each, "
                f"plus each process's own memory), and this machine has {fmt_gib(host)} free; on a CPU the ranks "
                "share its memory, and running past it is stopped by the system, not reported: lower world_size, "
                "batch, width or layers, or pick a strategy that shards more",
                est,
                "host_memory",
                peak_bytes=need,
                available_bytes=host,
            )
        return
    if dcfg.config.force:
        return  # a CUDA out-of-memory error is a result a learner can study
    free = gpu_free_bytes(world)
    smallest = min(free)
    if peak > REFUSE_FACTOR * smallest:
        raise WouldNotFit(
            f"estimated peak per rank {fmt_gib(peak)} does not fit the {fmt_gib(smallest)} free on GPU "
            f"{free.index(smallest)}; pick a strategy that shards more, reduce batch, width or layers, or force "
            "the run to see the out-of-memory error",
            est,
            "capacity",
            peak_bytes=peak,
            available_bytes=smallest,
        )
