"""The CPU-only estimate's reserved figure against every H200 recording that has one (recorded/h200): the run's largest
`memory_reserved` at a phase's end less what was reserved before its first tensor (the workspaces' segments), beside
`estimate(cfg, device_type="cuda")` without the GPU's measured scratch memory, as a learner without a GPU gets it.

    python benchmarks/recorded_reserved.py        # a line per recording, then the count exact / over / under
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from experiments.core.config import ExperimentConfig  # noqa: E402 - after the path
from experiments.core.units import MIB  # noqa: E402
from experiments.estimate.estimator import estimate  # noqa: E402


def main() -> None:
    diffs = []
    for path in sorted((ROOT / "recorded" / "h200").glob("*.json")):
        r = json.loads(path.read_text()).get("result") or {}
        reserved = [p["reserved_bytes"] for p in r.get("phases") or [] if p.get("reserved_bytes") is not None]
        start = (r.get("history") or {}).get("start_bytes")
        if not reserved or start is None:
            continue
        est = estimate(ExperimentConfig.from_dict(r["config"]), device_type="cuda")["reserved_bytes"]
        if est is None:
            continue
        measured = max(reserved) - start
        diffs.append((est - measured) / MIB)
        print(f"{path.stem:48s} estimate {est / MIB:9.1f} MiB  measured {measured / MIB:9.1f} MiB  {diffs[-1]:+8.1f}")
    exact = sum(1 for d in diffs if abs(d) < 0.05)
    over = [d for d in diffs if d >= 0.05]
    under = [d for d in diffs if d <= -0.05]
    print(
        f"{len(diffs)} recordings: {exact} exact, {len(over)} over (at most {max(over, default=0):.1f} MiB), "
        f"{len(under)} under (down to {min(under, default=0):.1f} MiB)"
    )


if __name__ == "__main__":
    main()
