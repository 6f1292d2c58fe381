"""The host memory this process may still take, and the memory limit that applies to it: its own control group's and every ancestor's, not only the root's.

A server started in a systemd slice, a Slurm job or with `cgexec` sits in a group below the root of what it sees; the
root has no limit there, so reading the root alone found none and the kernel's OOM killer ended runs the page had
called fitting. Each group on the way from the process's own up to the root may limit memory (cgroup v2
`memory.max` / `memory.current`, v1 `memory.limit_in_bytes` / `memory.usage_in_bytes`); the one with the least left
decides. Where the process's path is not visible (a container's namespace shows the group as its root, as Docker does),
the root's files are the group's own. Torch-free: the web process reads it too."""

from __future__ import annotations

import os
from dataclasses import dataclass

ROOT = "/sys/fs/cgroup"
PROC = "/proc/self/cgroup"
NO_LIMIT = 2**60  # v1 writes "no limit" as a page-aligned 2**63 - 1

# (where the hierarchy is mounted below ROOT, limit file, usage file)
V2 = ("", "memory.max", "memory.current")
V2_HYBRID = ("unified", "memory.max", "memory.current")
V1 = ("memory", "memory.limit_in_bytes", "memory.usage_in_bytes")


@dataclass(frozen=True)
class Limit:
    available_bytes: int
    limit_bytes: int
    group: str  # the group's path as /proc/self/cgroup names it ("/" for the root)


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max" (no limit) and unreadable files give None


def own_paths(proc: str | None = None) -> dict[str, str]:
    """The process's group per hierarchy: {"v2": path} and/or {"v1": path} (the memory controller's)."""
    out: dict[str, str] = {}
    try:
        with open(proc or PROC) as f:
            lines = f.read().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hid, controllers, path = parts
        if hid == "0" and controllers == "":
            out["v2"] = path
        elif "memory" in controllers.split(","):
            out["v1"] = path
    return out


def _ancestors(path: str) -> list[str]:
    """path, its parent, ... up to "/"."""
    parts = [p for p in path.split("/") if p]
    return ["/" + "/".join(parts[:i]) if i else "/" for i in range(len(parts), -1, -1)]


def _hierarchies(root: str, paths: dict[str, str]) -> list[tuple[str, str, str, str]]:
    """(mounted folder, limit file, usage file, the process's group) for each hierarchy that has a memory controller;
    without /proc/self/cgroup, the roots of both."""
    out = []
    if "v2" in paths or not paths:
        mount = V2 if os.path.exists(os.path.join(root, "cgroup.controllers")) else V2_HYBRID
        out.append((os.path.join(root, mount[0]), mount[1], mount[2], paths.get("v2", "/")))
    if "v1" in paths or not paths:
        out.append((os.path.join(root, V1[0]), V1[1], V1[2], paths.get("v1", "/")))
    return out


def applying_limit(root: str | None = None, proc: str | None = None) -> Limit | None:
    """The limit with the least memory left among the process's group and its ancestors; None where none is set.
    A group not visible here (above a namespace's root) is skipped: the visible root stands for it."""
    best: Limit | None = None
    for base, limit_file, usage_file, own in _hierarchies(root or ROOT, own_paths(proc or PROC)):
        for group in _ancestors(own):
            folder = os.path.join(base, group.lstrip("/"))
            limit, usage = _read_int(os.path.join(folder, limit_file)), _read_int(os.path.join(folder, usage_file))
            if limit is None or usage is None or limit >= NO_LIMIT:
                continue
            here = Limit(max(0, limit - usage), limit, group)
            if best is None or here.available_bytes < best.available_bytes:
                best = here
    return best


def meminfo_available(path: str = "/proc/meminfo") -> int | None:
    """The machine's MemAvailable, in bytes."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def host_available_bytes() -> tuple[int | None, Limit | None]:
    """(what the process may still allocate: the machine's MemAvailable or its control group's limit, whichever
    leaves less; the limit when it is the one that decides)."""
    available, limit = meminfo_available(), applying_limit()
    if limit is None or (available is not None and available <= limit.available_bytes):
        return available, None
    return limit.available_bytes, limit


def host_memory() -> dict:
    """A CPU device's free memory as the pages show it: {"free_bytes"[, "memory_limit": the group that decides]}."""
    free, limit = host_available_bytes()
    out: dict = {"free_bytes": free}
    if limit is not None:
        out["memory_limit"] = {"group": limit.group, "limit_bytes": limit.limit_bytes}
    return out


def with_host_memory(info: dict) -> dict:
    """A device report with a CPU's free memory read now (the web server's view: the worker reported it when it started,
    before the estimate processes and the runs since); a GPU's report as it is."""
    if info.get("type") != "cpu":
        return info
    return {k: v for k, v in info.items() if k != "memory_limit"} | host_memory()
