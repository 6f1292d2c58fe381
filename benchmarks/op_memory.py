"""Where a real CUDA step holds memory that the replay does not: the plain loop of a configuration, op by op.

Each aten op the step runs (forward, backward, optimizer) is timed against the caching allocator's books: allocated
before it, after it, and the most allocated while it ran. What an op held beyond both ends is scratch memory of its
kernel (cuBLAS copies, reduction buffers), which a fake tensor never has; the ops with the most of it are listed, with
their shapes, beside the run's peak and the replay's estimate of the same configuration. The peak itself is located:
the op during which it happened, its phase and step.

    python benchmarks/op_memory.py --preset mistral-7b --set layers=2 --batch 2 \
        --levers '{"finetune": "qlora", "checkpoint": "per_layer", "optimizer_impl": "foreach"}'
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def config(preset: str, levers: dict, batch: int, overrides: str, device: str):
    """A boundary trial's configuration (benchmarks/boundary_trial.config: a preset, a model source or "builtin"),
    with the preset's overrides, on `device`."""
    from boundary_trial import config as cell_config

    return cell_config(preset, {**levers, "model_overrides": overrides}, batch).replace(device=device)


def _shapes(args) -> list:
    import torch

    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append([list(a.shape), str(a.dtype).removeprefix("torch."), a.is_contiguous()])
        elif isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor):
            out.append(f"{len(a)} tensors")
    return out


def _out_bytes(out) -> int:
    import torch

    if isinstance(out, torch.Tensor):
        return out.untyped_storage().nbytes() if out.device.type == "cuda" else 0
    if isinstance(out, (list, tuple)):
        return sum(_out_bytes(o) for o in out)
    return 0


def plain_peak(cfg) -> int:
    """The plain loop's allocated peak with no mode on the stack (a dispatch mode makes torch's composites take their
    out-of-place branches, as on a tensor subclass)."""
    import torch
    from model_presets import plain_loop, plain_step

    dev = torch.device("cuda", 0)
    with plain_loop(cfg, dev) as (spec, model, opt, batch, amp):
        torch.cuda.reset_peak_memory_stats(dev)
        for _ in range(cfg.steps):
            plain_step(cfg, spec, model, opt, None, batch, amp, "cuda")
        torch.cuda.synchronize()
        del model, opt, batch
    return torch.cuda.max_memory_allocated(dev)


def measure(cfg, top: int) -> dict:
    import torch
    from model_presets import plain_loop, plain_step
    from torch.utils._python_dispatch import TorchDispatchMode

    dev = torch.device("cuda", 0)
    state = {"phase": "setup", "step": 0, "peak": 0, "peak_at": None}
    scratch: dict[str, dict] = collections.defaultdict(lambda: {"calls": 0, "max_bytes": 0})

    class Books(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            before = torch.cuda.memory_allocated(dev)
            torch.cuda.reset_peak_memory_stats(dev)
            out = func(*args, **(kwargs or {}))
            after = torch.cuda.memory_allocated(dev)
            during = torch.cuda.max_memory_allocated(dev)
            extra = during - max(before, after)
            name = str(func.name()).removeprefix("aten::")
            if extra > 0:
                key = json.dumps([name, _shapes(args)])
                row = scratch[key]
                row["calls"] += 1
                row["max_bytes"] = max(row["max_bytes"], extra)
                row["phase"] = f"{state['phase']} {state['step']}"
            if during > state["peak"]:
                state["peak"] = during
                state["peak_at"] = {
                    "op": name,
                    "args": _shapes(args),
                    "phase": state["phase"],
                    "step": state["step"],
                    "allocated_before": before,
                    "outputs": _out_bytes(out),
                    "scratch": extra,
                }
            return out

    with plain_loop(cfg, dev) as (spec, model, opt, (inputs, targets), amp):
        phases = []
        for step in range(1, cfg.steps + 1):
            state.update(phase="step", step=step)
            torch.cuda.synchronize()
            with Books():
                plain_step(cfg, spec, model, opt, None, (inputs, targets), amp, "cuda")
            torch.cuda.synchronize()
            phases.append({"step": step, "peak_bytes": state["peak"], "allocated_bytes": torch.cuda.memory_allocated()})
    rows = sorted(scratch.items(), key=lambda kv: -kv[1]["max_bytes"])[:top]
    return {
        "peak_bytes": state["peak"],
        "peak_at": state["peak_at"],
        "steps": phases,
        "scratch": [{"op": json.loads(k), **v} for k, v in rows],
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(dev),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", required=True)
    ap.add_argument("--levers", default="{}", help="JSON: the configuration's levers")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--set", default="", help="the preset's overrides, e.g. layers=2")
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--no-estimate", action="store_true")
    args = ap.parse_args()
    cfg = config(args.preset, json.loads(args.levers), args.batch, args.set, "cuda")
    result = {
        "config": {"preset": args.preset, "levers": json.loads(args.levers), "batch": args.batch, "set": args.set}
    }
    if not args.no_estimate:
        from experiments.estimate.estimator import estimate

        est = estimate(cfg.replace(steps=2), device_type="cuda")
        result["estimate_peak_bytes"] = est["peak_bytes"]
        result["estimate_path"] = est.get("path")
        result["estimate_phases"] = [
            (p["phase"], p["step"], p["peak_bytes"]) for p in est["phases"] if p["phase"] in ("forward", "backward")
        ]
    import gc

    import torch

    result["plain_peak_bytes"] = plain_peak(cfg)
    gc.collect()
    torch.cuda.empty_cache()
    result.update(measure(cfg, args.top))
    if "estimate_peak_bytes" in result:
        result["missed_bytes"] = result["plain_peak_bytes"] - result["estimate_peak_bytes"]
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
