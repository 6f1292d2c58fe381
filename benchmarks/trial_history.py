"""A boundary trial (benchmarks/boundary_trial.py) with the caching allocator's history kept, so that where a real
run's segments part from the allocator model's can be read on any machine afterwards.

    python benchmarks/trial_history.py '{"params": {...}, "card_bytes": N, "expandable": false, "outside": {...}}' OUT
    python benchmarks/trial_history.py '{...}' OUT --cpp    # C++ frames too, for events over 1 MiB (slower)

OUT (JSON): the trial's row and every allocator event in order: action, bytes, address, the top frames (with --cpp:
the autograd engine's and ATen's, where an allocation or a free came from inside them).
"""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from boundary_trial import trial  # noqa: E402 - after the path


def frames(event: dict, n: int = 4) -> list[str]:
    return [f"{Path(f['filename']).name}:{f['line']} {f['name']}" for f in (event.get("frames") or [])[:n]]


CPP_KEYS = ("autograd", "at::native", "at::_ops", "Engine", "InputBuffer", "SavedVariable", "release")


def cpp_frames(event: dict, n: int = 14) -> list[str]:
    """The Python frames and the C++ frames of autograd and ATen, for events over 1 MiB."""
    if (event.get("size") or 0) <= 2**20:
        return []
    keep = [
        f
        for f in event.get("frames") or []
        if f.get("filename", "").endswith(".py") or any(k in f.get("name", "") for k in CPP_KEYS)
    ]
    return [f"{Path(f.get('filename', '')).name}:{f.get('line')} {f.get('name', '')[:140]}" for f in keep[:n]]


def main() -> None:
    import torch

    a = json.loads(sys.argv[1])
    cpp = "--cpp" in sys.argv[3:]
    torch.cuda.memory._record_memory_history(
        enabled="all", context="all" if cpp else "alloc", stacks="all" if cpp else "python", max_entries=2_000_000
    )
    gc.collect()
    row = trial(a["params"], a["card_bytes"], a["expandable"], a.get("outside"))
    snap = torch.cuda.memory._snapshot()
    events = [
        [e["action"], e.get("size"), e.get("addr"), (cpp_frames if cpp else frames)(e)]
        for e in snap["device_traces"][0]
    ]
    Path(sys.argv[2]).write_text(json.dumps({"trial": row, "events": events}))
    print(json.dumps({**row, "events": len(events)}))


if __name__ == "__main__":
    main()
