"""What a CPU run costs the worker process beyond its tensors: the margin the CPU fit check adds (experiments/measure/
fits.py PROCESS_MARGIN_BYTES, docs/operators.md).

    python benchmarks/worker_rss.py --out docs/worker-rss.json

In a fresh process (as a worker is): RSS bare, after importing torch and the engine, then per run of a known
configuration its tensor peak (the tracker's, what the estimate predicts) against the process's peak RSS during the
run (VmHWM, reset before each run). The margin is the largest peak RSS growth beyond the tensor peak; a run whose
estimate plus this margin passes the free memory would be killed by the system, not reported.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

CONFIGS = (
    {},
    {"batch": 64, "width": 512},
    {"model": "transformer", "batch": 8},
    {"batch": 128, "width": 1024, "layers": 6},
    {},
)


def _status(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS (Linux >= 4.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    bare = _status("VmRSS")
    import torch

    from experiments.core.config import ExperimentConfig
    from experiments.jobs.kinds import execute

    imported = _status("VmRSS")
    runs = []
    for params in CONFIGS:
        cfg = ExperimentConfig(**(params | {"steps": 2, "timing_steps": 1, "device": "cpu"}))
        before = _status("VmRSS")
        _reset_peak()
        t0 = time.perf_counter()
        result = execute("run", cfg.to_dict())
        net = result["peak_bytes"] - (result.get("baseline_bytes") or 0)
        hwm = _status("VmHWM")
        runs.append(
            {
                "params": params,
                "tensor_peak_bytes": net,
                "rss_before_bytes": before,
                "rss_peak_bytes": hwm,
                "rss_after_bytes": _status("VmRSS"),
                "beyond_tensors_bytes": hwm - before - net,
                "seconds": round(time.perf_counter() - t0, 2),
            }
        )
        print(json.dumps(runs[-1]), flush=True)
    report = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "rss_bare_bytes": bare,
        "rss_imported_bytes": imported,
        "runs": runs,
        "margin_bytes": max(r["beyond_tensors_bytes"] for r in runs),
    }
    print(json.dumps({k: v for k, v in report.items() if k != "runs"}))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
