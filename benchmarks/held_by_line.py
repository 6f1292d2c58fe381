"""Where a CUDA forward's held memory was allocated, by source line, beside the replay's figure for the same forward.

A plain loop runs one step (the optimizer's state exists after it), then the forward of step 2 under the allocator's
memory history; the blocks still allocated when the loss is returned are what backward will read (activations,
autocast copies). Each is charged to the innermost Python frame outside torch's own modules and this script, and the
lines are listed by bytes. The replay's estimate of the same configuration gives its allocated figure after the
forward of step 2, so that a gap between the two has an address.

    python benchmarks/held_by_line.py --source hf:t5:seq2seq_lm --set layers=1 --batch 16 --seq-len 512 \
        --precision amp_bf16
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

_SKIP = ("site-packages/torch/", "held_by_line.py", "model_presets.py", "/experiments/training/")


def _where(frames: list[dict]) -> str:
    for f in frames:
        name = f.get("filename", "")
        if name.endswith(".py") and not any(s in name for s in _SKIP):
            return f"{name.split('site-packages/')[-1]}:{f.get('line')} {f.get('name')}"
    return "?"


def held(cfg, top: int) -> dict:
    import torch
    from model_presets import plain_loop, plain_step

    dev = torch.device("cuda", 0)
    with plain_loop(cfg, dev) as (spec, model, opt, (inputs, targets), amp):
        plain_step(cfg, spec, model, opt, None, (inputs, targets), amp, "cuda")
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated(dev)
        torch.cuda.memory._record_memory_history(max_entries=2_000_000, stacks="python")
        with torch.amp.autocast("cuda", dtype=amp) if amp else contextlib.nullcontext():
            loss = spec.loss(cfg, model, inputs, targets)
        torch.cuda.synchronize()
        after = torch.cuda.memory_allocated(dev)
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        del loss
    lines: dict[str, dict] = collections.defaultdict(lambda: {"bytes": 0, "blocks": 0, "sizes": collections.Counter()})
    for seg in snap["segments"]:
        for block in seg["blocks"]:
            if block["state"] != "active_allocated" or not block.get("frames"):
                continue  # blocks from before the history was on (weights, state) have no frames
            row = lines[_where(block["frames"])]
            row["bytes"] += block["requested_size"]
            row["blocks"] += 1
            row["sizes"][block["requested_size"]] += 1
    ranked = sorted(lines.items(), key=lambda kv: -kv[1]["bytes"])[:top]
    return {
        "held_by_forward_bytes": after - before,
        "lines": [
            {"where": k, "bytes": v["bytes"], "blocks": v["blocks"], "sizes": v["sizes"].most_common(4)}
            for k, v in ranked
        ],
        "device": torch.cuda.get_device_name(dev),
        "torch": torch.__version__,
    }


def replay_held(cfg) -> int:
    """The replay's allocated bytes after the forward of step 2, less its allocated bytes before that step."""
    from experiments.estimate.estimator import estimate

    phases = estimate(cfg, device_type="cuda")["phases"]
    fwd = next(p for p in phases if p["step"] == 2 and p["phase"] == "forward")
    zero = next(p for p in phases if p["step"] == 2 and p["phase"] == "zero_grad")
    return fwd["allocated_bytes"] - zero["allocated_bytes"]


def main() -> None:
    from experiments.core.config import ExperimentConfig

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", required=True, help="a model source, e.g. preset:gpt2 or hf:t5:seq2seq_lm")
    ap.add_argument("--set", default="", help="overrides, e.g. layers=1")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--levers", default="{}", help="JSON: other levers")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    data = {"model_source": a.source, "model_overrides": a.set, "batch": a.batch, "seq_len": a.seq_len}
    data |= {"precision": a.precision, "device": "cuda", "steps": 2, "timing_steps": 0, **json.loads(a.levers)}
    cfg = ExperimentConfig.from_dict(data)
    out = {"config": data, "replay_held_bytes": replay_held(cfg), **held(cfg, a.top)}
    out["gap_bytes"] = out["held_by_forward_bytes"] - out["replay_held_bytes"]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
