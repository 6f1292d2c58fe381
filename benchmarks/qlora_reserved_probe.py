"""Where a real run's `memory_reserved` departs from the CPU replay's, stage by stage, for one case of
benchmarks/finetune_methods.py (default: llama3-8b-qlora-ckpt-all-paged8bit, whose reserved estimate is 4.7 % off).

The real side runs the benchmark's own functions (`config`, `build`, `optimizer`, `step`; its loop is not copied) on
CUDA and reads memory_allocated / memory_reserved / max_memory_reserved at each stage: transformers' caching-allocator
warm-up inside from_pretrained (where that function exists), from_pretrained's return, peft's
prepare_model_for_kbit_training, get_peft_model (build's end), the optimizer, the batch, and steps 1-3 (step 1 also
after its forward, by a forward hook on the model, and after its backward, by an optimizer step pre-hook). Each
stage's `torch.cuda.memory._snapshot()` gives the segments that appeared since the last stage; full segment summaries
(sizes, bytes allocated in each, counts by size class, the largest segment's blocks) are kept for every stage, and
the allocator's history (segment creations with their Python stacks) is recorded from the build to the end of step 1.

The replay side is the estimate `predict()` prints (experiments/estimate/estimator.py: the full replay on fake CPU
tensors, every storage in 512-byte blocks, the trace through the caching-allocator model), run in a child process
while the GPU works; the same trace is walked again to give allocated and reserved at each phase's end and the
segments the model opens in each phase. Last, two what-ifs through the same allocator model: the replay's trace with
the real warm-up allocation put in front of it, and the real build's own recorded allocations and frees followed by
the replay's trace from its optimizer phase on.

    python3 benchmarks/qlora_reserved_probe.py --out /tmp/probe                   # CUDA: the run and the replay
    python3 benchmarks/qlora_reserved_probe.py --estimate-only --out /tmp/probe   # the replay only (any machine)

Files under --out: probe.jsonl (every stage), replay.json and replay.log (the replay's side), snapshots.json (segment
summaries per stage), history.json (segment creations with their stacks), summary.json (the comparison).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import finetune_methods as fm  # noqa: E402 - after the path

DEFAULT_CASE = "llama3-8b-qlora-ckpt-all-paged8bit"
MIB, GIB = 2**20, 2**30
# The replay's phases each real stage is compared with: (phase, step) of the replay's rows.
REPLAY_OF = {
    "peft": ("model", 0),
    "optimizer": ("optimizer", 0),
    "data": ("data", 0),
    "step1:forward": ("forward", 1),
    "step1:backward": ("backward", 1),
    "step1": ("optimizer_step", 1),
    "step2": ("optimizer_step", 2),
    "step3": ("optimizer_step", 2),  # the replay runs two steps; step 2's end is its steady state
}
BIG_ALLOC = 64 * MIB  # allocations at least this large are listed with their stacks


def gb(n) -> float | None:
    return None if n is None else round(n / 1e9, 3)


def size_class(n: int) -> str:
    if n <= 2 * MIB:
        return "2MiB"
    if n <= 20 * MIB:
        return "20MiB"
    if n <= 100 * MIB:
        return "(20,100]MiB"
    if n <= GIB:
        return "(100MiB,1GiB]"
    return ">1GiB"


# ---------------------------------------------------------------------------------------------------------- replay


def replay_side(cfg, events_path: str | None) -> dict:
    """predict()'s figures, then the same replay with its trace kept: allocated/reserved at every phase's end and the
    segments the allocator model opens in each phase."""
    from experiments.estimate.allocator_model import replay_trace
    from experiments.estimate.estimator import cuda_config
    from experiments.estimate.replay import replay

    t0 = time.perf_counter()
    figures = fm.predict(cfg, "cuda")  # the benchmark's own call: estimate_or_refusal(cfg, "cuda", fast=False)
    if "cannot_predict" in figures:
        return {"predict": figures}
    # What estimate() replays (cuda_config, 512-byte blocks, fake CPU tensors, no measured workspaces), trace kept.
    r = replay(cuda_config(cfg), block=512, keep_events=True)
    events = r["events"]
    alloc = replay_trace(events)
    walk = walk_segments(events)
    rows = []
    for p, m, segs in zip(r["phases"], alloc["marks"], walk["per_phase"], strict=True):
        rows.append(
            {
                "phase": p["phase"],
                "step": p["step"],
                "micro": p["micro"],
                "allocated": int(m["allocated_bytes"]),
                "reserved": int(m["reserved_bytes"]),
                "peak_allocated": int(m["peak_allocated_bytes"]),
                "tracker_allocated": int(p["allocated_bytes"]),
                "new_segments": segs,
            }
        )
    if events_path:
        Path(events_path).write_text(json.dumps(events), encoding="utf-8")
    return {
        "predict": figures,
        "peak_reserved": int(alloc["peak_reserved_bytes"]),
        "peak_allocated": int(alloc["peak_allocated_bytes"]),
        "consistent_with_predict": int(alloc["peak_reserved_bytes"]) == figures["estimate_reserved_bytes"],
        "rows": rows,
        "segments_after_model": walk["after_model"],
        "segments_at_end": walk["at_end"],
        "events": len(events),
        "seconds": round(time.perf_counter() - t0, 1),
    }


def walk_segments(events) -> dict:
    """The caching-allocator model over the trace, as replay_trace runs it, noting each segment it opens and every
    segment's fill at the model phase's end and at the trace's end (the reserved peak: the model never frees one)."""
    from experiments.estimate.allocator_model import CachingAllocatorModel

    class Segments(CachingAllocatorModel):
        def __init__(self):
            super().__init__()
            self.phase = 0
            self.opened: list[dict] = []

        def _new_block(self, size, pool_name):
            block = super()._new_block(size, pool_name)
            self.opened.append({"phase": self.phase, "segment": block.segment, "size": block.size, "request": size})
            return block

        def state(self) -> dict:
            blocks = defaultdict(list)
            for b in self._live.values():
                blocks[b.segment].append((b.offset, b.size, "allocated"))
            for b in self._by_key.values():
                blocks[b.segment].append((b.offset, b.size, "free"))
            segs = []
            for s in self.opened:
                bl = sorted(blocks[s["segment"]])
                segs.append(
                    {
                        "size": s["size"],
                        "allocated": sum(n for _, n, st in bl if st == "allocated"),
                        "blocks": len(bl),
                        "opened_in_phase": s["phase"],
                        "request": s["request"],
                    }
                )
            return segment_digest(segs, largest_blocks=_largest_blocks(self.opened, blocks))

    model = Segments()
    per_phase, after_model, last = [], None, None
    seen = 0
    for kind, key, nbytes in events:
        if kind == "alloc":
            model.malloc(key, nbytes)
        elif kind == "free":
            model.free(key)
        else:
            new = model.opened[seen:]
            seen = len(model.opened)
            per_phase.append(opened_digest([s["size"] for s in new]))
            last = model.state()
            after_model = after_model or last
            model.phase += 1
    # The last phase's end (step 2's optimizer step) holds the reserved peak; what follows in the trace is teardown.
    return {"per_phase": per_phase, "after_model": after_model, "at_end": last}


def _largest_blocks(opened, blocks) -> list:
    if not opened:
        return []
    top = max(opened, key=lambda s: s["size"])
    return [{"offset": o, "size": n, "state": st} for o, n, st in sorted(blocks[top["segment"]])][:600]


def opened_digest(sizes: list[int]) -> dict:
    return {
        "count": len(sizes),
        "bytes": sum(sizes),
        "by_class": dict(Counter(size_class(n) for n in sizes)),
        "largest": sorted(sizes, reverse=True)[:8],
    }


def segment_digest(segs: list[dict], largest_blocks: list | None = None) -> dict:
    """segs: {"size", "allocated", ...} per segment -> counts by size class, totals, the segments over 100 MiB."""
    by_class = defaultdict(lambda: {"count": 0, "bytes": 0, "allocated": 0})
    for s in segs:
        c = by_class[size_class(s["size"])]
        c["count"] += 1
        c["bytes"] += s["size"]
        c["allocated"] += s["allocated"]
    return {
        "segments": len(segs),
        "reserved": sum(s["size"] for s in segs),
        "allocated": sum(s["allocated"] for s in segs),
        "by_class": dict(by_class),
        "big": sorted((s for s in segs if s["size"] > 100 * MIB), key=lambda s: -s["size"]),
        "all_sizes": sorted((s["size"] for s in segs), reverse=True),
        "largest_blocks": largest_blocks or [],
    }


def whatif_warmup(events, warm_bytes: int) -> dict:
    """The replay's trace with one allocation of `warm_bytes`, freed at once, before the model phase: what
    transformers' caching_allocator_warmup does before it loads a checkpoint."""
    from experiments.estimate.allocator_model import replay_trace

    warm = [["alloc", -(2**62), warm_bytes], ["free", -(2**62), 0]]
    r = replay_trace([tuple(e) for e in warm + list(events)])
    return {
        "warm_bytes": warm_bytes,
        "peak_reserved": int(r["peak_reserved_bytes"]),
        "peak_allocated": int(r["peak_allocated_bytes"]),
        "reserved_per_phase": [int(m["reserved_bytes"]) for m in r["marks"]],
    }


def whatif_real_build(build_events, events) -> dict:
    """The allocator model over the real run's own build (its recorded allocations and frees, from_pretrained to
    get_peft_model), then the replay's trace from its optimizer phase on: how much of the departure the build makes.
    The replay's later frees of its own model-phase storages find nothing and are ignored, as replay_trace does."""
    from experiments.estimate.allocator_model import replay_trace

    trace = [
        ("alloc" if a == "alloc" else "free", ("real", addr), n if a == "alloc" else 0) for a, addr, n in build_events
    ]
    trace.append(("mark", 0, 0))
    first = next(i for i, e in enumerate(events) if e[0] == "mark")
    r = replay_trace(trace + [tuple(e) for e in events[first + 1 :]])
    return {
        "build_events": len(build_events),
        "peak_reserved": int(r["peak_reserved_bytes"]),
        "reserved_per_phase": [int(m["reserved_bytes"]) for m in r["marks"]],
        "allocated_per_phase": [int(m["allocated_bytes"]) for m in r["marks"]],
    }


# ------------------------------------------------------------------------------------------------------- real run


class Probe:
    """Reads the allocator at each stage and keeps the snapshots' segment summaries."""

    def __init__(self, out: Path, dev):
        import torch

        self.torch, self.dev, self.out = torch, dev, out
        self.rows: list[dict] = []
        self.snapshots: dict[str, dict] = {}
        self.prev: dict[int, int] = {}  # segment address -> size at the last stage
        self.made: dict[int, str] = {}  # segment address -> the stage it first appeared in
        self.recording = False
        self.recorded_marks: list[str] = []
        self.t0 = time.perf_counter()
        self.baseline = (0, 0)
        self.log = open(out / "probe.jsonl", "w", encoding="utf-8")  # noqa: SIM115 - closed in finish()

    def mark(self, stage: str, **extra) -> dict:
        torch = self.torch
        torch.cuda.synchronize()
        snap = torch.cuda.memory._snapshot()
        if self.recording:
            self.recorded_marks.append(stage)
        segs = [s for s in snap["segments"] if s.get("device", 0) == (self.dev.index or 0)]
        now = {s["address"]: s["total_size"] for s in segs}
        new = [n for a, n in now.items() if self.prev.get(a) != n]
        gone = [n for a, n in self.prev.items() if now.get(a) != n]
        for a, n in now.items():
            if self.prev.get(a) != n:
                self.made[a] = stage
        self.prev = now
        row = {
            "stage": stage,
            "allocated": torch.cuda.memory_allocated(),
            "reserved": torch.cuda.memory_reserved(),
            "max_allocated": torch.cuda.max_memory_allocated(),
            "max_reserved": torch.cuda.max_memory_reserved(),
            "segments": len(segs),
            "new_segments": opened_digest(new),
            "gone_segment_bytes": sum(gone),
            "t": round(time.perf_counter() - self.t0, 1),
            **extra,
        }
        self.rows.append(row)
        self.snapshots[stage] = self.digest(segs)
        print(json.dumps(row), flush=True)
        self.log.write(json.dumps(row) + "\n")
        self.log.flush()
        return row

    def digest(self, segs) -> dict:
        rows = [
            {
                "address": s["address"],
                "size": s["total_size"],
                "allocated": s["allocated_size"],
                "pool": s.get("segment_type"),
                "blocks": len(s["blocks"]),
                "made_in": self.made.get(s["address"]),
                "made_by": where(s.get("frames")),
            }
            for s in segs
        ]
        largest = max(segs, key=lambda s: s["total_size"], default=None)
        blocks = []
        if largest is not None:
            off = 0
            for b in largest["blocks"][:600]:
                blocks.append(
                    {
                        "offset": off,
                        "size": b["size"],
                        "requested": b.get("requested_size"),
                        "state": b["state"],
                        "by": where(b.get("frames"), 2),
                    }
                )
                off += b["size"]
        return segment_digest(rows, largest_blocks=blocks)


def where(frames, n: int = 4) -> list[str]:
    """A stack's first frames outside torch's plumbing, as 'file:line function'."""
    if not frames:
        return []
    skip = ("torch/nn/modules/module.py", "torch/utils/_contextlib.py", "torch/_tensor.py", "torch/cuda/memory.py")
    out = []
    for f in frames:
        name = f.get("filename", "?")
        if any(name.endswith(s) for s in skip):
            continue
        out.append(f"{'/'.join(name.split('/')[-2:])}:{f.get('line')} {f.get('name')}")
        if len(out) == n:
            break
    return out


def start_history(torch, entries: int) -> bool:
    if entries <= 0:
        return False
    try:
        torch.cuda.memory._record_memory_history(
            "all", context="alloc", stacks="python", max_entries=entries, skip_actions=["free_requested"]
        )
    except TypeError:  # a torch without skip_actions
        try:
            torch.cuda.memory._record_memory_history("all", context="alloc", stacks="python", max_entries=entries)
        except Exception as e:  # noqa: BLE001 - the stages' figures do not need the history
            print(json.dumps({"note": f"no allocator history: {e!r}"[:300]}))
            return False
    return True


def history(snap, probe: Probe) -> dict:
    """Segment creations (and frees) and the big allocations of the recorded trace, each with its stage: the trace's
    'snapshot' entries (one per stage read while recording) divide it, the segment's address is the cross-check."""
    traces = snap.get("device_traces") or [[]]
    index = probe.dev.index or 0
    trace = traces[index] if len(traces) > index else traces[0]
    marks = probe.recorded_marks
    n_snap = sum(1 for e in trace if e.get("action") == "snapshot")
    by_snapshot = n_snap >= len(marks) - 1 and n_snap > 0
    seen, segments, big, counts, build = 0, [], [], Counter(), []
    end_of_build = marks.index("peft") if "peft" in marks else -1
    for e in trace:
        action = e.get("action")
        counts[action] += 1
        if action == "snapshot":
            seen += 1
            continue
        stage = marks[min(seen, len(marks) - 1)] if by_snapshot and marks else None
        if by_snapshot and seen <= end_of_build and action in ("alloc", "free_completed"):
            build.append((action, e.get("addr"), e.get("size") or 0))  # the build's own trace, up to get_peft_model
        if action in ("segment_alloc", "segment_free", "segment_map", "segment_unmap"):
            segments.append(
                {
                    "action": action,
                    "size": e.get("size"),
                    "addr": e.get("addr"),
                    "stage": stage,
                    "stage_by_address": probe.made.get(e.get("addr")),
                    "by": where(e.get("frames"), 5),
                }
            )
        elif action == "alloc" and (e.get("size") or 0) >= BIG_ALLOC:
            big.append({"size": e.get("size"), "addr": e.get("addr"), "stage": stage, "by": where(e.get("frames"), 3)})
    return {
        "entries": len(trace),
        "actions": dict(counts),
        "stages_from_snapshot_entries": by_snapshot,
        "segments": segments,
        "big_allocations": big,
        "build_events": build,
    }


def real_side(cfg, out: Path, entries: int, dev=None) -> dict:
    """The benchmark's loop on CUDA, read at every stage. `dev`: CUDA's current device unless given."""
    import torch

    dev = dev or torch.device("cuda", torch.cuda.current_device())
    # The benchmark's baseline, as measure() makes it: cuBLAS workspaces, bitsandbytes' caches, then empty_cache.
    from benchmarks.model_presets import _warm_cublas

    _warm_cublas(dev)
    gc.collect()
    torch.cuda.empty_cache()
    import peft
    import transformers
    from bitsandbytes import functional

    functional.quantize_4bit(torch.zeros(64, device=dev), quant_type=cfg.quant_type, compress_statistics=True)

    probe = Probe(out, dev)
    base = probe.mark(
        "baseline",
        device=torch.cuda.get_device_name(),
        torch=torch.__version__,
        transformers=transformers.__version__,
        peft=peft.__version__,
        bitsandbytes=getattr(sys.modules.get("bitsandbytes"), "__version__", None),
        alloc_conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
    )
    probe.baseline = (base["allocated"], base["reserved"])

    # Stages inside build(): wrappers around the library functions it calls (looked up at call time).
    from transformers import AutoModelForCausalLM
    from transformers import modeling_utils as mu

    original = {}  # (owner, name) -> what owner.__dict__ held (None: inherited, deleted again afterwards)

    def wrap(owner, name, before: str | None, after: str, extra=None):
        fn = getattr(owner, name, None)
        if fn is None:
            print(json.dumps({"note": f"{getattr(owner, '__name__', owner)}.{name} not found: no stage {after}"}))
            return
        original[(owner, name)] = vars(owner).get(name)

        def wrapped(*args, **kwargs):
            if before:
                probe.mark(before)
            result = fn(*args, **kwargs)
            probe.mark(after, **(extra(args, kwargs) if extra else {}))
            return result

        setattr(owner, name, wrapped)

    def warm_bytes(args, kwargs):
        try:
            model, device_map, quantizer = args[:3]
            accel = {p: torch.device(d) for p, d in device_map.items() if torch.device(d).type == "cuda"}
            counts = mu.get_total_byte_count(model, accel, quantizer)
            return {"warmup_byte_count": {str(k): int(v) for k, v in counts.items()}}
        except Exception as e:  # noqa: BLE001 - an informative figure only
            return {"warmup_byte_count_error": repr(e)[:200]}

    # The warm-up is called by its global name: patched in every transformers module that holds it.
    holders = [
        m
        for n, m in list(sys.modules.items())
        if n.startswith("transformers") and m is not None and callable(vars(m).get("caching_allocator_warmup"))
    ]
    for m in holders:
        wrap(m, "caching_allocator_warmup", "warmup:before", "warmup:after", warm_bytes)
    if not holders:
        print(json.dumps({"note": "no caching_allocator_warmup in transformers: no warm-up stage"}))
    wrap(AutoModelForCausalLM, "from_pretrained", None, "from_pretrained")
    wrap(peft, "prepare_model_for_kbit_training", None, "prepare_kbit")

    recording = probe.recording = start_history(torch, entries)
    torch.manual_seed(cfg.seed)
    model, vocab = fm.build(cfg, dev)
    for (owner, name), fn in original.items():
        if fn is None:
            delattr(owner, name)
        else:
            setattr(owner, name, fn)
    probe.mark("peft")
    opt = fm.optimizer(cfg, model.parameters())
    probe.mark("optimizer")
    ids = torch.randint(0, vocab, (cfg.batch, cfg.seq_len), generator=torch.Generator().manual_seed(1)).to(dev)
    probe.mark("data")
    offload = torch.autograd.graph.save_on_cpu(pin_memory=True) if cfg.offload_activations else None
    hist, peaks, peak_reserved_before_reset = None, [], []
    for step in (1, 2, 3):
        torch.cuda.synchronize()
        gc.collect()
        peak_reserved_before_reset.append(torch.cuda.max_memory_reserved())
        torch.cuda.reset_peak_memory_stats()  # as measure() does before each step
        handles = []
        if step == 1:  # the hooks return None: a value would replace the model's output or the step's arguments

            def after_forward(module, args, output):
                probe.mark("step1:forward")

            def after_backward(optimizer, args, kwargs):
                probe.mark("step1:backward")

            handles.append(model.register_forward_hook(after_forward))
            try:
                handles.append(opt.register_step_pre_hook(after_backward))
            except AttributeError:
                print(json.dumps({"note": "no optimizer step pre-hook: no stage step1:backward"}))
        fm.step(model, opt, ids, offload)
        for h in handles:
            h.remove()
        row = probe.mark(f"step{step}")
        peaks.append(row["max_allocated"] - probe.baseline[0])
        if step == 1 and recording:
            hist = history(torch.cuda.memory._snapshot(), probe)
            torch.cuda.memory._record_memory_history(None)
            probe.recording = False
    probe.log.close()
    return {
        "rows": probe.rows,
        "snapshots": probe.snapshots,
        "history": hist,
        "step_peaks_over_baseline": peaks,  # measure()'s figures: step 2's is "measured_peak_bytes"
        "max_reserved_step3": torch.cuda.max_memory_reserved(),  # measure()'s "reserved_bytes"
        "max_reserved_before_each_reset": peak_reserved_before_reset,
    }


# ---------------------------------------------------------------------------------------------------------- report


def compare(real: dict, rep: dict) -> list[dict]:
    rows = {(r["phase"], r["step"]): r for r in rep.get("rows", [])}
    base_a, base_r = real["rows"][0]["allocated"], real["rows"][0]["reserved"]
    out = []
    for r in real["rows"]:
        e = rows.get(REPLAY_OF.get(r["stage"]))
        out.append(
            {
                "stage": r["stage"],
                "real_allocated": r["allocated"] - base_a,
                "real_reserved": r["reserved"] - base_r,
                "real_max_reserved": r["max_reserved"] - base_r,
                "replay_phase": f"{e['phase']}@{e['step']}" if e else None,
                "replay_allocated": e["allocated"] if e else None,
                "replay_reserved": e["reserved"] if e else None,
                "reserved_diff": (e["reserved"] - (r["reserved"] - base_r)) if e else None,
                "real_new_segments": r["new_segments"]["bytes"],
                "replay_new_segments": e["new_segments"]["bytes"] if e else None,
            }
        )
    return out


def print_table(table: list[dict]) -> None:
    print("\nGB (1e9); real figures less the baseline's (what the replay starts from); diff = replay - real reserved")
    head = f"{'stage':16} {'real alloc':>10} {'real resv':>10} {'replay phase':>18} {'rep alloc':>10} {'rep resv':>10}"
    print(head + f" {'diff':>8} {'real +seg':>10} {'rep +seg':>10}")
    for t in table:
        cells = [gb(t[k]) for k in ("real_allocated", "real_reserved")]
        rep = [gb(t[k]) for k in ("replay_allocated", "replay_reserved", "reserved_diff")]
        segs = [gb(t["real_new_segments"]), gb(t["replay_new_segments"])]
        print(
            f"{t['stage']:16} {cells[0]!s:>10} {cells[1]!s:>10} {t['replay_phase']!s:>18} "
            + " ".join(f"{v!s:>10}" if i < 2 else f"{v!s:>8}" for i, v in enumerate(rep))
            + " "
            + " ".join(f"{v!s:>10}" for v in segs)
        )


def print_replay(rep: dict) -> None:
    print(
        json.dumps(
            {
                "replay_predict": rep.get("predict"),
                "peak_reserved": rep.get("peak_reserved"),
                "consistent_with_predict": rep.get("consistent_with_predict"),
                "seconds": rep.get("seconds"),
            }
        )
    )
    for r in rep.get("rows", []):
        print(
            json.dumps(
                {
                    "replay_phase": r["phase"],
                    "step": r["step"],
                    "allocated": r["allocated"],
                    "reserved": r["reserved"],
                    "peak_allocated": r["peak_allocated"],
                    "new_segments": r["new_segments"],
                }
            )
        )
    for key in ("segments_after_model", "segments_at_end"):
        d = rep.get(key)
        if d:
            print(
                json.dumps(
                    {
                        f"replay_{key}": {k: d[k] for k in ("segments", "reserved", "allocated", "by_class")},
                        "big": [(s["size"], s["allocated"], s["opened_in_phase"]) for s in d["big"]],
                    }
                )
            )


def print_snapshot(stage: str, d: dict) -> None:
    print(
        json.dumps(
            {
                f"real_segments_{stage}": {k: d[k] for k in ("segments", "reserved", "allocated", "by_class")},
                "big": [(s["size"], s["allocated"], s["made_in"], s["made_by"][:1]) for s in d["big"]],
            }
        )
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--case", default=DEFAULT_CASE, choices=list(fm.CASES))
    p.add_argument("--out", default=str(ROOT / "artifacts" / "qlora-reserved-probe"))
    p.add_argument("--estimate-only", action="store_true", help="the replay's phases only (no GPU needed)")
    p.add_argument("--no-estimate", action="store_true", help="the real run only")
    p.add_argument("--history-entries", type=int, default=200_000, help="allocator history kept (0: none)")
    p.add_argument("--events", help=argparse.SUPPRESS)  # where the replay child leaves its trace
    a = p.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    preset, levers = fm.CASES[a.case]
    cfg = fm.config(preset, levers, False, "cuda")

    if a.estimate_only:
        rep = replay_side(cfg, a.events)
        (out / "replay.json").write_text(json.dumps(rep, indent=1) + "\n", encoding="utf-8")
        print_replay(rep)
        return 0

    child, events_path = None, f"/tmp/qlora-probe-events-{os.getpid()}.json"
    if not a.no_estimate:
        log = open(f"/tmp/qlora-probe-replay-{os.getpid()}.log", "w+", encoding="utf-8")  # noqa: SIM115
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--case",
            a.case,
            "--estimate-only",
            "--out",
            str(out),
            "--events",
            events_path,
        ]
        child = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    t0 = time.perf_counter()
    real = real_side(cfg, out, a.history_entries)
    print(
        json.dumps(
            {
                "real_seconds": round(time.perf_counter() - t0, 1),
                "step_peaks_over_baseline": real["step_peaks_over_baseline"],
                "max_reserved_step3": real["max_reserved_step3"],
                "max_reserved_before_each_reset": real["max_reserved_before_each_reset"],
            }
        )
    )
    stages = [r["stage"] for r in real["rows"]]
    peak = max(real["rows"], key=lambda r: r["reserved"])["stage"]
    for stage in dict.fromkeys(
        s for s in ("warmup:after", "from_pretrained", "prepare_kbit", "peft", peak) if s in stages
    ):
        print_snapshot(stage, real["snapshots"][stage])
    if real["history"]:
        h = real["history"]
        print(
            json.dumps(
                {
                    "history_entries": h["entries"],
                    "actions": h["actions"],
                    "stages_from_snapshot_entries": h["stages_from_snapshot_entries"],
                }
            )
        )
        # Segments over 20 MiB one by one (at most 60), the others counted per stage and action.
        small, printed = Counter(), 0
        for s in h["segments"]:
            if (s["size"] or 0) > 20 * MIB and printed < 60:
                printed += 1
                row = {"seg": s["action"], "size": s["size"], "stage": s["stage"], "by_address": s["stage_by_address"]}
                print(json.dumps({**row, "by": s["by"][:3]}))
            else:
                small[f"{s['stage']} {s['action']} {size_class(s['size'] or 0)}"] += 1
        print(json.dumps({"small_segments": dict(small)}))
        (out / "history.json").write_text(
            json.dumps({k: v for k, v in h.items() if k != "build_events"}, indent=1) + "\n", encoding="utf-8"
        )
    (out / "snapshots.json").write_text(json.dumps(real["snapshots"]) + "\n", encoding="utf-8")

    rep, whatif, hybrid = {}, None, None
    if child is not None:
        child.wait()
        log.seek(0)
        text = log.read()
        (out / "replay.log").write_text(text, encoding="utf-8")
        print(text[-6000:])
        try:
            rep = json.loads((out / "replay.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            print(json.dumps({"replay_error": repr(e)}))
        warm = [r for r in real["rows"] if r["stage"] == "warmup:after"]
        events = json.loads(Path(events_path).read_text(encoding="utf-8")) if os.path.exists(events_path) else None
        if events and real["history"] and real["history"]["build_events"]:
            hybrid = whatif_real_build(real["history"]["build_events"], events)
            print(json.dumps({"whatif_real_build": hybrid}))
        if warm and events:
            grown = warm[0]["new_segments"]["largest"]
            if grown:
                whatif = whatif_warmup(events, grown[0])
                print(
                    json.dumps(
                        {
                            "whatif_warmup": {k: v for k, v in whatif.items() if k != "reserved_per_phase"},
                            "reserved_per_phase": whatif["reserved_per_phase"][:7],
                        }
                    )
                )
        if events is not None:
            os.remove(events_path)
    table = compare(real, rep)
    print_table(table)
    summary = {
        "case": a.case,
        "device": real["rows"][0].get("device"),
        "versions": {k: real["rows"][0].get(k) for k in ("torch", "transformers", "peft", "bitsandbytes")},
        "table": table,
        "benchmark_figures": {
            "measured_reserved_bytes": real["max_reserved_step3"],
            "estimate_reserved_bytes": (rep.get("predict") or {}).get("estimate_reserved_bytes"),
            "measured_peak_bytes": real["step_peaks_over_baseline"][1],
            "estimate_peak_bytes": (rep.get("predict") or {}).get("estimate_peak_bytes"),
        },
        "reserved_peak_stage": peak,
        "whatif_warmup": whatif,
        "whatif_real_build": hybrid,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({"benchmark_figures": summary["benchmark_figures"], "reserved_peak_stage": peak}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
