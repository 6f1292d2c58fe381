"""How long a learner's estimate waits beside other tabs' expensive ones, at the estimate pool every page uses
(experiments/jobs/estimates.py, two processes as a server has).

    python benchmarks/estimate_latency.py --out rule.json; python benchmarks/estimate_latency.py --no-rule --out before.json

Each scenario: E tabs each ask for two expensive estimates at once (a transformer of 64 layers, 50 steps, accumulation
64: about 26 s of replay on an idle 2-core machine, so the pool's 20 s limit refuses it), and then, one a second, 8
other tabs each ask for a cheap one (the sandbox's MLP at its own width). Reported: each cheap estimate's wait from its
request to its result. `--no-rule` lets a session take both processes, as the pool did before policy.may_start.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from experiments.core.config import ExperimentConfig  # noqa: E402
from experiments.jobs import estimates, policy  # noqa: E402

EXPENSIVE = {"model": "transformer", "layers": 64, "steps": 50, "accum": 64, "batch": 64, "device": "cpu"}
CHEAP = {"device": "cpu", "layers": 4, "batch": 32}


def scenario(pool: estimates.EstimatePool, expensive_tabs: int, tag: str) -> list[float]:
    for tab in range(expensive_tabs):
        for n in range(2):
            cfg = ExperimentConfig(**dict(EXPENSIVE, batch=64 * (1 + n), seed=tab, timing_steps=tab + 1))
            pool.request(
                ("x", tag, tab, n), "experiments.estimate.estimator:estimate", (cfg, None), {}, owner=f"x{tab}"
            )
    time.sleep(0.3)
    waits = []
    for learner in range(8):
        cfg = ExperimentConfig(**dict(CHEAP, width=64 + 8 * learner, seed=len(tag)))
        t0 = time.monotonic()
        pool.estimate(cfg, None, "cpu", None, owner=f"learner{learner}-{tag}", wait=None)
        waits.append(round(time.monotonic() - t0, 2))
        time.sleep(max(0.0, 1.0 - (time.monotonic() - t0)))
    return waits


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--no-rule", action="store_true", help="a session may take every process (the pool before)")
    ap.add_argument("--processes", type=int, default=2, help="the pool's size (estimate_processes)")
    args = ap.parse_args()
    if args.no_rule:
        policy.may_start = lambda *a: True
    out = {"rule": not args.no_rule, "processes": args.processes}
    for tabs in (0, 1, 3):
        pool = estimates.EstimatePool(processes=args.processes)
        assert pool.warm(240)
        pool.estimate(ExperimentConfig(**CHEAP, width=8), None, "cpu", None, owner="warm-up", wait=None)
        waits = scenario(pool, tabs, f"t{tabs}")
        pool.close()
        out[f"beside_{tabs}_expensive_tabs"] = {
            "waits_s": waits,
            "median_s": statistics.median(waits),
            "max_s": max(waits),
        }
        print(tabs, out[f"beside_{tabs}_expensive_tabs"], flush=True)
    print(json.dumps(out, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
