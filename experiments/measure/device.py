"""Which device a run uses and what it looks like from torch and from the driver."""

from __future__ import annotations

import platform

import torch
from torch.utils.checkpoint import checkpoint

from ..core.cgroup import applying_limit, host_available_bytes, host_memory
from ..core.config import DEVICES, ConfigError
from ..estimate.throughput import rates_report
from ..estimate.workspaces import cache_path


def resolve_device(choice: str) -> torch.device:
    """Every entry point (run, leak, fragmentation, CLI, worker job) goes through here: one rule for "device"."""
    if choice not in DEVICES:
        raise ConfigError(
            "device",
            f"got {choice!r}; allowed: {', '.join(DEVICES)}",
            "choice",
            value=choice,
            allowed=", ".join(DEVICES),
        )
    if choice == "cuda" or (choice == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise ConfigError(
                "device",
                "got 'cuda' but torch.cuda.is_available() is False; allowed here: auto, cpu",
                "cuda_unavailable",
            )
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def warm_up_cuda(device: torch.device) -> None:
    """Allocate the cuBLAS workspaces (forward thread and autograd's backward thread) before measuring.

    They live in `memory_allocated` for the rest of the process; without this, whichever run comes
    first in a process would carry them in its peak.
    """
    linear = torch.nn.functional.linear
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        w = torch.randn(64, 64, device=device, dtype=dtype, requires_grad=True)
        b = torch.randn(64, device=device, dtype=dtype, requires_grad=True)
        (w @ w).sum().backward()
        # A Linear with a bias runs through cuBLASLt, whose own 1 MiB workspace is allocated on first use.
        for x in (w, w.view(4, 16, 64)):
            linear(x, w, b).sum().backward()
        # Each thread has its own handles: checkpointing recomputes a Linear in autograd's backward thread, whose
        # cuBLASLt workspace would otherwise be a persistent 1 MiB inside a checkpointed run's first backward
        # (on an H100: the peak 0.99 MiB above the estimate, one more small-pool segment kept). The ReLU saves the
        # Linear's output: a region whose backward needs only its own inputs is not run again.
        checkpoint(_linear_relu, w, w, b, use_reentrant=False).sum().backward()
    torch.cuda.synchronize(device)


def _linear_relu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.relu(torch.nn.functional.linear(x, w, b))


def cgroup_available_bytes() -> int | None:
    """What the memory limit of this process's control group (or an ancestor's) still allows; None without one. A
    host's MemAvailable cannot see it, and a run that passes MemAvailable but not the limit is killed by the OOM
    killer, worker and all."""
    limit = applying_limit()
    return None if limit is None else limit.available_bytes


def cpu_available_bytes() -> int | None:
    return host_available_bytes()[0]


def device_info(choice: str = "auto", rates: bool = True) -> dict:
    """`rates`: with the rates the step-time prediction divides a step's work by (experiments/estimate/throughput.py;
    the worker's calibrated ones come from experiments/estimate/calibration.py)."""
    device = resolve_device(choice)
    info = {
        "type": device.type,
        "torch_version": str(torch.__version__),  # a plain str: a TorchVersion would import torch where it is read
        "cuda_version": torch.version.cuda,
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        free, total = torch.cuda.mem_get_info(device)
        info.update(
            name=props.name,
            index=device.index,
            total_bytes=total,
            free_bytes=free,
            # Held by this process's caching allocator but unused: a run can have it without the driver.
            cached_free_bytes=torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device),
            capability=f"{props.major}.{props.minor}",
            multiprocessors=props.multi_processor_count,
        )
        # Where the worker keeps the cuDNN workspaces it measured: the web process reads them for its estimates.
        info["workspaces_path"] = str(cache_path(props.name))
    else:
        info.update(
            name=platform.processor() or platform.machine() or "CPU",
            total_bytes=_cpu_total_bytes(),
            threads=torch.get_num_threads(),
        )
        info |= host_memory()  # free_bytes, and the control group whose limit decides it
    return (info | rates_report(device.type)) if rates else info


def _cpu_total_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            return int(f.readline().split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
