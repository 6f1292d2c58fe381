"""Fragmentation in the CUDA caching allocator, for real: reserved vs allocated after two allocation patterns,
with the default allocator and with expandable segments.

- "growing": a tensor that grows a little every step (a varying batch or sequence length). Every new
  size misses the cached blocks, so each step reserves a new segment; with expandable segments the
  one segment grows in place instead.
- "holes": blocks in the 1-10 MiB class share 20 MiB segments; freeing every other one leaves holes
  that a later, larger request cannot use, so reserved stays well above allocated.
- "carved": one large block is freed first (a big activation of an earlier phase), so the blocks that
  follow are carved out of its cached segment; every other one is freed, then blocks twice the size are
  requested one at a time. The default allocator can neither merge the holes nor give them back (the
  segment still holds live blocks), while an expandable segment unmaps whole free 20 MiB pages and maps
  them again where the larger block goes: with holes of whole pages, more larger blocks fit a budget.
With a budget, "holes" and "carved" end in a real out-of-memory error whose message reports the bytes
"reserved by PyTorch but unallocated".
"""

from __future__ import annotations

import datetime as _dt
import gc
import json
import sys

import torch

from ..core.config import BUDGET_MB, ConfigError
from ..core.units import MIB
from ..measure.device import device_info, resolve_device
from ..measure.fresh_process import run_module

PATTERNS = ("growing", "holes", "carved")
ALLOCATORS = ("standard", "expandable")
LIMITS = {"steps": (2, 64), "size_mb": (1, 1024)}


def _check(pattern: str, steps: int, size_mb: int, budget_mb) -> None:
    if pattern not in PATTERNS:
        raise ConfigError(
            "pattern",
            f"got {pattern!r}; allowed: {', '.join(PATTERNS)}",
            "choice",
            value=pattern,
            allowed=", ".join(PATTERNS),
        )
    for name, value in (("steps", steps), ("size_mb", size_mb)):
        lo, hi = LIMITS[name]
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise ConfigError(name, f"got {value!r}; allowed range is [{lo}, {hi}]", "range", value=value, lo=lo, hi=hi)
    lo, hi = BUDGET_MB
    if budget_mb is not None and (
        isinstance(budget_mb, bool) or not isinstance(budget_mb, (int, float)) or not lo <= budget_mb <= hi
    ):
        raise ConfigError(
            "budget_mb",
            f"got {budget_mb!r}; allowed range is [{lo}, {hi}] MB, or none",
            "range",
            value=budget_mb,
            lo=lo,
            hi=hi,
        )


def run_fragmentation(
    pattern: str = "growing", device: str = "auto", steps: int = 12, size_mb: int = 6, budget_mb: float | None = None
) -> dict:
    _check(pattern, steps, size_mb, budget_mb)
    dev = resolve_device(device)
    if dev.type != "cuda":
        raise ConfigError(
            "device",
            "fragmentation is a property of the CUDA caching allocator and needs a GPU; "
            "the runs recorded on an NVIDIA H200 show it without one",
            "needs_cuda",
        )
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    runs = {
        name: _in_fresh_process(dev, pattern, name == "expandable", steps, size_mb, budget_mb) for name in ALLOCATORS
    }
    return {
        "kind": "fragmentation",
        "pattern": pattern,
        "steps": steps,
        "size_mb": size_mb,
        "budget_mb": budget_mb,
        "device": device_info("cuda"),
        "runs": runs,
        "started_at": started,
    }


def _in_fresh_process(dev, pattern: str, expandable: bool, steps: int, size_mb: int, budget_mb) -> dict:
    """One allocator setting in a new process on the same GPU. A process that ran anything before holds cached
    blocks (a segment kept by one live tensor keeps its free part), which would serve the pattern's requests and
    hide the fragmentation; and PYTORCH_CUDA_ALLOC_CONF, set here as a learner would, is read at process start."""
    args = {"pattern": pattern, "expandable": expandable, "steps": steps, "size_mb": size_mb, "budget_mb": budget_mb}
    done = run_module("experiments.labs.fragmentation", args, expandable, timeout=300, device_index=dev.index)
    if done.returncode != 0:
        raise RuntimeError(f"the fragmentation run failed: {done.stderr.strip()[-600:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _set_expandable(on: bool) -> None:
    """What PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True does, switched at run time for new segments."""
    setting = f"expandable_segments:{'True' if on else 'False'}"
    # torch >= 2.9 moved the setter to the accelerator-generic API and deprecated the CUDA one.
    setter = getattr(torch._C, "_accelerator_setAllocatorSettings", None) or torch.cuda.memory._set_allocator_settings
    setter(setting)


def _one(dev, pattern: str, expandable: bool, steps: int, size_mb: int, budget_mb) -> dict:
    gc.collect()
    torch.cuda.synchronize(dev)
    torch.cuda.empty_cache()
    _set_expandable(expandable)
    base_alloc, base_res = torch.cuda.memory_allocated(dev), torch.cuda.memory_reserved(dev)
    known_segments = {s["address"] for s in torch.cuda.memory_snapshot() if s.get("device") == dev.index}
    points: list[dict] = []
    live: list = []
    oom = None

    def mark(label: str, nbytes: int) -> None:
        points.append(
            {
                "i": len(points),
                "op": label,
                "bytes": nbytes,
                "allocated_bytes": torch.cuda.memory_allocated(dev) - base_alloc,
                "reserved_bytes": torch.cuda.memory_reserved(dev) - base_res,
            }
        )

    def alloc(nbytes: int) -> torch.Tensor:
        t = torch.empty(nbytes, dtype=torch.uint8, device=dev)
        mark("alloc", nbytes)
        return t

    if budget_mb is not None:
        total = torch.cuda.get_device_properties(dev).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, (base_res + budget_mb * MIB) / total), dev)
    try:
        if pattern == "growing":
            # +2 MiB a step: every request is larger than any cached block.
            for i in range(steps):
                t = alloc(size_mb * MIB + i * 2 * MIB)
                del t
                mark("free", 0)
        elif pattern == "holes":
            live = [alloc(size_mb * MIB) for _ in range(steps)]
            for i in range(0, steps, 2):
                live[i] = None
                mark("free", 0)
            live += [alloc(2 * size_mb * MIB) for _ in range(steps // 2)]
        else:
            first = alloc(steps * size_mb * MIB)
            del first
            mark("free", 0)
            live = [alloc(size_mb * MIB) for _ in range(steps)]
            for i in range(0, steps, 2):
                live[i] = None
                mark("free", 0)
            for _ in range(steps // 2):
                live.append(alloc(2 * size_mb * MIB))  # one at a time: those that fit stay allocated
    except torch.OutOfMemoryError as e:
        oom = {"message": str(e).split("\n")[0][:800]}
        mark("oom", 0)
        del e
    end = {
        "allocated_bytes": torch.cuda.memory_allocated(dev) - base_alloc,
        "reserved_bytes": torch.cuda.memory_reserved(dev) - base_res,
        "segments": _segments(dev, known_segments),
    }
    live.clear()
    gc.collect()
    torch.cuda.synchronize(dev)
    torch.cuda.empty_cache()
    _set_expandable(False)
    if budget_mb is not None:
        torch.cuda.set_per_process_memory_fraction(1.0, dev)
    return {
        "allocator": "expandable" if expandable else "standard",
        "points": points,
        "end": end,
        "oom": oom,
        "peak_reserved_bytes": max((p["reserved_bytes"] for p in points), default=0),
    }


def _segments(dev, known: set) -> list[dict]:
    """The segments this run created: size, bytes in live blocks, live block count (the allocator's view)."""
    out = []
    for seg in torch.cuda.memory_snapshot():
        if seg.get("device") != dev.index or seg["address"] in known:
            continue
        blocks = seg.get("blocks") or []
        out.append(
            {
                "total_bytes": seg["total_size"],
                "allocated_bytes": seg["allocated_size"],
                "pool": seg.get("segment_type", "?"),
                "live_blocks": sum(1 for b in blocks if b.get("state") == "active_allocated"),
                "free_blocks": sum(1 for b in blocks if b.get("state") == "inactive"),
                # The blocks themselves, for the segment chart (app/features/timeline_view.py): where the holes are.
                "address": seg["address"],
                "expandable": bool(seg.get("is_expandable")),
                "blocks": _blocks(seg),
            }
        )
    return out


def _blocks(seg: dict) -> list[dict]:
    out, at = [], seg["address"]
    for b in seg.get("blocks") or []:
        addr = b.get("address", at)
        state = "allocated" if b.get("state") in ("active_allocated", "active_pending_free") else "free"
        out.append({"offset": addr - seg["address"], "size": b["size"], "state": state})
        at = addr + b["size"]
    return out


if __name__ == "__main__":  # one allocator setting in this fresh process (see _in_fresh_process)
    spec = json.loads(sys.argv[1])
    print(
        json.dumps(
            _one(
                torch.device("cuda", 0),
                spec["pattern"],
                spec["expandable"],
                spec["steps"],
                spec["size_mb"],
                spec["budget_mb"],
            )
        )
    )
