"""A boundary trial (benchmarks/boundary_trial.py) with the caching allocator's history kept, so that where a real
run's segments part from the allocator model's can be read on any machine afterwards.

    python benchmarks/trial_history.py '{"params": {...}, "card_bytes": N, "expandable": false, "outside": {...}}' OUT

OUT (JSON): the trial's row and every allocator event in order: action, bytes, address, the top Python frames.
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


def main() -> None:
    import torch

    a = json.loads(sys.argv[1])
    torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python", max_entries=2_000_000)
    gc.collect()
    row = trial(a["params"], a["card_bytes"], a["expandable"], a.get("outside"))
    snap = torch.cuda.memory._snapshot()
    events = [[e["action"], e.get("size"), e.get("addr"), frames(e)] for e in snap["device_traces"][0]]
    Path(sys.argv[2]).write_text(json.dumps({"trial": row, "events": events}))
    print(json.dumps({**row, "events": len(events)}))


if __name__ == "__main__":
    main()
