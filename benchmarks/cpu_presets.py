"""Every lesson preset run in the engine on the CPU: run time and median step (docs/cpu-speed.md).

    python benchmarks/cpu_presets.py
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from experiments.config import ExperimentConfig
from experiments.runner import run_experiment

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    run_experiment(ExperimentConfig(layers=2, width=64, batch=8, device="cpu"))  # imports and first-call costs
    print("| preset | run | median step |\n|---|---|---|")
    for meta in sorted(ROOT.glob("lessons/*/meta.json")):
        preset = json.loads(meta.read_text()).get("preset")
        if not preset or meta.parent.name == "multigpu":
            continue
        cfg = ExperimentConfig.from_dict({**preset, "device": "cpu"})
        t0 = time.perf_counter()
        result = run_experiment(cfg)
        print(f"| {meta.parent.name} | {time.perf_counter() - t0:.1f} s | {result['step_ms']['median']:.0f} ms |",
              flush=True)


if __name__ == "__main__":
    main()
