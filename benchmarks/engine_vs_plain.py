"""The engine's allocated peak against a plain loop's, on the GPU, for configurations with residual connections: where
autograd sums two gradients of one tensor, it sums in place in a plain loop and out of place under the engine's
tracker (any dispatch mode), unless GML_SUMS_IN_PLACE=1 (experiments/measure/engine_sums.py).

    python benchmarks/engine_vs_plain.py CONFIG_JSON [CONFIG_JSON ...]                       # on a GPU
    GML_SUMS_IN_PLACE=1 python benchmarks/engine_vs_plain.py CONFIG_JSON [CONFIG_JSON ...]

One line per configuration: the engine's peak above its baseline, the plain loop's above its own, their difference,
and the CUDA estimate's (made with the same setting). CONFIG_JSON: configuration fields, e.g. a grid row's
(docs/benchmarks/estimate-grid-*.json) or {"model_source": "preset:gpt2", "batch": 4}. The plain loop takes the whole
batch at once: a configuration that accumulates gradients is not comparable with it.
"""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from boundary_trial import config_of, plain_steps  # noqa: E402 - after the path


def plain_peak(cfg) -> int:
    import torch

    from experiments.measure.device import warm_up_cuda

    dev = torch.device("cuda")
    warm_up_cuda(dev)
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    plain_steps(cfg, dev)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    gc.collect()
    torch.cuda.empty_cache()
    return peak


def main() -> None:
    from experiments.estimate.estimator import estimate
    from experiments.measure import engine_sums
    from experiments.measure.run import run_experiment

    for text in sys.argv[1:]:
        cfg = config_of(text)
        r = run_experiment(cfg)
        engine = r["peak_bytes"] - r["baseline_bytes"]
        plain = plain_peak(cfg)
        est = estimate(cfg)
        row = {
            "sums_in_place": engine_sums.ENABLED,
            "engine": engine,
            "plain": plain,
            "engine_minus_plain": engine - plain,
            "estimate": est.get("peak_bytes"),
            "config": json.loads(text),
        }
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
