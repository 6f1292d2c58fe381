"""Where the estimate's reserved figure stands against a run's on CUDA, for small configurations: the allocator's
segments after the warm-up (cuBLAS and cuBLASLt workspaces, which live for the whole process), then per
configuration the run's allocated and reserved figures beside the CPU replay's.

    python benchmarks/reserved_offset.py --json out.json      # on a GPU
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402 - after the path

from experiments.core.config import ExperimentConfig  # noqa: E402
from experiments.estimate.estimator import estimate  # noqa: E402
from experiments.measure.device import warm_up_cuda  # noqa: E402
from experiments.measure.run import run_experiment  # noqa: E402

CONFIGS = [
    {"layers": 3, "width": 128, "batch": 8},
    {"layers": 4, "width": 384, "batch": 24, "precision": "tf32", "accum": 2, "optimizer": "sgd_momentum"},
    {"model": "transformer", "layers": 1, "width": 256, "batch": 4, "seq_len": 512, "heads": 4},
    {"model": "cnn", "layers": 2, "width": 16, "batch": 48, "image_size": 128, "precision": "bf16"},
    {"layers": 12, "width": 1408, "batch": 264, "precision": "tf32", "checkpoint": "per_layer"},
]


def segments() -> list[dict]:
    return [
        {
            "pool": s["segment_type"],
            "size": s["total_size"],
            "allocated": s["allocated_size"],
            "blocks": [(b["size"], b["state"]) for b in s["blocks"]],
        }
        for s in torch.cuda.memory_snapshot()
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    args = ap.parse_args()
    dev = torch.device("cuda", 0)
    warm_up_cuda(dev)
    torch.cuda.empty_cache()
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "after_warm_up": segments(), "runs": []}
    print(json.dumps({"after_warm_up": out["after_warm_up"]}))
    for c in CONFIGS:
        cfg = ExperimentConfig.from_dict({**c, "device": "cuda", "steps": 2})
        est = estimate(cfg, device_type="cuda")
        torch.cuda.reset_peak_memory_stats()
        r = run_experiment(cfg, history=False)
        row = {
            "config": c,
            "baseline_allocated": r["baseline_bytes"],
            "measured_peak": r["peak_bytes"],
            "measured_reserved_max_phase": max(p["reserved_bytes"] or 0 for p in r["phases"]),
            "max_memory_reserved": torch.cuda.max_memory_reserved(),
            "estimate_peak": est["peak_bytes"],
            "estimate_reserved": est["reserved_bytes"],
            "segments_at_end": [(s["pool"], s["size"], s["allocated"]) for s in segments()],
        }
        out["runs"].append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
