"""Which device a run uses and what it looks like from torch and from the driver."""

from __future__ import annotations

import torch


def resolve_device(choice: str) -> torch.device:
    """Every entry point (run, leak, fragmentation, CLI, worker job) goes through here: one rule for "device"."""
    from ..core.config import DEVICES, ConfigError

    if choice not in DEVICES:
        raise ConfigError("device", f"got {choice!r}; allowed: {', '.join(DEVICES)}", "choice", value=choice,
                          allowed=", ".join(DEVICES))
    if choice == "cuda" or (choice == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            from ..core.config import ConfigError

            raise ConfigError("device", "got 'cuda' but torch.cuda.is_available() is False; allowed here: auto, cpu")
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


CGROUP_FILES = (
    ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),  # cgroup v2
    ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),  # v1
)


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max" (no limit) and unreadable files give None


def cgroup_available_bytes() -> int | None:
    """What the container's memory limit still allows; None without a limit. A host's MemAvailable cannot see
    it, and a run that passes MemAvailable but not the limit is killed by the OOM killer, worker and all."""
    for limit_path, usage_path in CGROUP_FILES:
        limit, usage = _read_int(limit_path), _read_int(usage_path)
        if limit is not None and usage is not None and limit < 2**60:
            return max(0, limit - usage)
    return None


def cpu_available_bytes() -> int | None:
    available = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    limited = cgroup_available_bytes()
    if available is None or limited is None:
        return available if limited is None else limited
    return min(available, limited)


def device_info(choice: str = "auto", rates: bool = True, calibrate: bool = False) -> dict:
    """`rates`: the measured rates (throughput.measure); `calibrate`: also what a whole run's duration and a CPU
    step's efficiency need (throughput.calibrate, tens of seconds on a busy CPU: the worker's second report)."""
    device = resolve_device(choice)
    info = {
        "type": device.type,
        "torch_version": torch.__version__,
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
        from ..estimate.workspaces import cache_path

        # Where the worker keeps the cuDNN workspaces it measured: the web process reads them for its estimates.
        info["workspaces_path"] = str(cache_path(props.name))
    else:
        import platform

        info.update(
            name=platform.processor() or platform.machine() or "CPU",
            total_bytes=_cpu_total_bytes(),
            free_bytes=cpu_available_bytes(),
            threads=torch.get_num_threads(),
        )
    if not rates:
        return info
    try:
        from ..estimate.throughput import calibrate as calibrated
        from ..estimate.throughput import measure

        # Measured once per process: what the step-time prediction divides a step's work by.
        info["rates"] = (calibrated if calibrate else measure)(device.type)
    except Exception as e:  # noqa: BLE001 - no rates means no time prediction, not a failed device report
        info["rates_error"] = f"{type(e).__name__}: {e}"
    return info


def _cpu_total_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            return int(f.readline().split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
