"""Estimates and measurements before and after a restructuring: the same seeded grid, byte for byte.

    python benchmarks/layout_parity.py --root /tmp/parity-main --out /tmp/parity-main.json     # the old layout
    python benchmarks/layout_parity.py --root .                --out /tmp/parity-branch.json   # the new one
    python benchmarks/layout_parity.py --compare /tmp/parity-main.json /tmp/parity-branch.json
    python benchmarks/layout_parity.py --root . --device cuda --out parity-h200.json   (real runs on the GPU)

`--root` is the checkout whose engine is measured (flat `experiments/*.py` or the packages of issue 16: both
are found). The grid covers every value of every option (the three models, each precision, checkpoint mode,
optimizer and implementation, accumulation, zero_grad and in-place flags), at sizes two loaded CPU cores run
in a few minutes. For each configuration it writes the estimate for device_type "cpu" and "cuda" (peak,
phase, categories, steady state, reserved, step work, op signatures) and one real run on `--device` (each
phase's allocated/reserved/peak bytes, the peak and its breakdown, FLOPs, losses, the allocation timeline as
a digest of its events). Times, dates, device reports, addresses and source lines are left out: they differ
between any two runs (or, for source lines, between layouts).
Each measurement starts with an empty cuDNN workspace cache of its own, so both sides probe the same ops.
In the packages' layout the file also has "extras": the per-rank estimate of every strategy on small seeded
data-parallel configurations (replays, for device_type "cpu" and "cuda"), three gradient checks and every leak
scenario (real runs on `--device`).
`--compare` fails (exit 1) on any difference and prints where; on CUDA, losses and the gradient checks' figures
may differ by 1e-4 relative (some CUDA kernels are not bitwise reproducible between runs), everything else must
be equal.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LOSS_RTOL_CUDA = 1e-4
RUN_KEYS = (
    "baseline_bytes",
    "peak_bytes",
    "peak_phase",
    "breakdown",
    "breakdown_steady",
    "flops_per_step",
    "losses",
    "oom",
    "allocated_after_bytes",
    "cancelled",
)
PHASE_KEYS = ("step", "micro", "phase", "allocated_bytes", "reserved_bytes", "peak_bytes", "failed")
ESTIMATE_KEYS = (
    "peak_bytes",
    "peak_phase",
    "categories",
    "steady",
    "reserved_bytes",
    "step",
    "signatures",
    "unmeasured",
    "fits",
)
HISTORY_KEYS = ("source", "start_bytes", "peak_bytes", "final_bytes", "raw_events", "coalesced", "truncated")


def load_engine(root: Path):
    """The engine of the checkout at `root`, in whichever layout it has."""
    sys.path.insert(0, str(root))
    import experiments

    if Path(experiments.__file__).resolve().parent != (root / "experiments").resolve():
        raise SystemExit(f"imported {experiments.__file__}, not the engine under {root}")
    try:
        from experiments.core.config import CHOICES, ExperimentConfig
        from experiments.estimate.estimator import estimate
        from experiments.measure.run import run_experiment

        layout = "packages"
    except ModuleNotFoundError:  # the flat layout before issue 16
        from experiments.config import CHOICES, ExperimentConfig  # move_engine: keep
        from experiments.estimator import estimate  # move_engine: keep
        from experiments.runner import run_experiment  # move_engine: keep

        layout = "flat"
    return layout, CHOICES, ExperimentConfig, estimate, run_experiment


def load_extras():
    """What the extra sections call (the packages' layout only): its entry points, wherever a stage put them."""
    import importlib

    def first(*names):
        for name in names:
            module, _, attr = name.rpartition(".")
            try:
                return getattr(importlib.import_module(module), attr)
            except (ModuleNotFoundError, AttributeError):
                continue
        raise SystemExit(f"none of {names} in this checkout")

    return {
        "DistributedConfig": first(
            "experiments.core.config.DistributedConfig", "experiments.distributed.launch.DistributedConfig"
        ),
        "estimate_sharded": first("experiments.distributed.estimate.estimate_sharded"),
        "check_gradients": first("experiments.training.guard.check_gradients"),
        "run_leak": first("experiments.labs.leaks.run_leak"),
        "SCENARIOS": first("experiments.labs.leaks.SCENARIOS"),
    }


def grid(choices: dict, n: int, seed: int) -> list[dict]:
    """n configurations; each option's values are dealt out evenly and shuffled, so every value appears about
    n / len(values) times in random company. Then three under a memory budget (out of memory, refused)."""
    rng = random.Random(seed)

    def dealt(values) -> list:
        out = [values[i % len(values)] for i in range(n)]
        rng.shuffle(out)
        return out

    options = {
        name: dealt(list(choices[name])) for name in ("model", "precision", "checkpoint", "optimizer", "optimizer_impl")
    }
    options["accum"] = dealt([1, 2])
    options["zero_grad_to_none"] = dealt([True, False])
    options["inplace"] = dealt([False, True])
    configs = []
    for i in range(n):
        c = {k: v[i] for k, v in options.items()}
        model = c["model"]
        c["batch"] = c["accum"] * rng.choice((1, 2, 4))
        # Few layers: a step's cost on CPU is its number of ops, and one layer more shows nothing new.
        if model == "mlp":
            c |= {"layers": rng.randint(1, 3), "width": rng.choice((16, 32, 48))}
        elif model == "cnn":
            c |= {"layers": rng.randint(1, 2), "width": rng.choice((8, 16)), "image_size": rng.choice((8, 12))}
        else:
            heads = rng.choice((1, 2))
            c |= {
                "layers": rng.randint(1, 2),
                "heads": heads,
                "width": 8 * heads * rng.choice((1, 2)),
                "seq_len": rng.choice((4, 8)),
            }
        c["segments"] = rng.randint(1, c["layers"]) if c["checkpoint"] == "segments" and rng.random() < 0.5 else 0
        c |= {"steps": 2, "timing_steps": 0, "seed": rng.randint(0, 1000)}
        configs.append(c)
    # A memory budget (its smallest is 1 MB, so these are larger): run into it (force), or be refused before.
    base = {"model": "mlp", "layers": 2, "width": 512, "batch": 64, "steps": 2, "timing_steps": 0, "seed": 1}
    configs += [
        base | {"optimizer": "adam", "budget_mb": 4, "force": True},
        base | {"optimizer": "adamw", "precision": "amp_bf16", "accum": 2, "budget_mb": 6, "force": True},
        base | {"optimizer": "sgd", "budget_mb": 1},
    ]
    return configs


def _error(e: Exception) -> dict:
    return {"error": f"{type(e).__name__}: {e}"}


def _estimate(estimate, cfg, device_type: str) -> dict:
    try:
        est = estimate(cfg, device_type=device_type)
    except Exception as e:  # noqa: BLE001 - an error is a result too: both layouts must raise the same
        return _error(e)
    return {k: est.get(k) for k in ESTIMATE_KEYS}


def _canonical_events(events: list[dict]) -> list[list]:
    """The events' bytes, categories, phases and counts in order, except within a run of consecutive frees (or of
    allocations) of one phase, which is sorted: autocast empties its weight cache in hash order, which differs
    from process to process, and reordering such a run moves no running total's maximum."""
    out, run = [], []
    for e in events:
        item = [e.get("bytes") or 0, e.get("category"), e.get("phase"), e.get("n")]
        if run and (item[2] != run[0][2] or (item[0] < 0) != (run[0][0] < 0)):
            out += sorted(run, key=json.dumps)
            run = []
        run.append(item)
    return out + sorted(run, key=json.dumps)


def _history_digest(h: dict | None) -> dict | None:
    """The timeline without what moves between runs (times, addresses, source lines): its figures, and a hash
    of its events (see _canonical_events) and phase marks."""
    if not h:
        return h
    events = _canonical_events(h.get("events", []))
    phases = [[p.get("phase"), p.get("step"), p.get("micro"), p.get("seq")] for p in h.get("phases", [])]
    blob = json.dumps([events, phases], sort_keys=True).encode()
    return {k: h.get(k) for k in HISTORY_KEYS} | {"events": len(events), "sha256": hashlib.sha256(blob).hexdigest()}


def _run(run_experiment, cfg) -> dict:
    try:
        r = run_experiment(cfg)
    except Exception as e:  # noqa: BLE001 - as above
        return _error(e)
    out = {k: r.get(k) for k in RUN_KEYS}
    if out["oom"]:
        out["oom"] = {k: v for k, v in out["oom"].items() if k != "message"}  # the message quotes free memory
    out["phases"] = [{k: p.get(k) for k in PHASE_KEYS} for p in r.get("phases", [])]
    out["estimate"] = {k: (r.get("estimate") or {}).get(k) for k in ESTIMATE_KEYS}
    out["history"] = _history_digest(r.get("history"))
    return out


def sharded_grid(n: int, seed: int) -> list[dict]:
    """Small data-parallel configurations for the per-rank estimate (every strategy, two and three ranks)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        model = ("mlp", "transformer", "cnn")[i % 3]
        c = {
            "model": model,
            "precision": rng.choice(("fp32", "bf16", "amp_bf16", "amp_fp16")),
            "checkpoint": rng.choice(("none", "per_layer")),
            "accum": rng.choice((1, 2)),
            "optimizer": rng.choice(("adam", "adamw", "sgd_momentum")),
            "steps": 2,
            "timing_steps": 0,
            "world_size": rng.choice((2, 3)),
            "check_update": False,
            "seed": rng.randint(0, 1000),
        }
        if model == "mlp":
            c |= {"layers": rng.randint(1, 3), "width": rng.choice((16, 32)), "batch": 2 * rng.choice((1, 2))}
        elif model == "cnn":
            c |= {"layers": 2, "width": 8, "image_size": 8, "batch": 2}
        else:
            c |= {"layers": rng.randint(1, 2), "width": 16, "heads": 2, "seq_len": 8, "batch": 2}
        out.append(c)
    return out


STRATEGIES = ("ddp", "ddp_zero1", "fsdp2_zero2", "fsdp2_zero3", "fsdp2_offload")


def _json_safe(x):
    return json.loads(json.dumps(x, default=str))


def extras(device: str, seed: int) -> dict:
    """Per-rank estimates (deterministic replays), gradient checks and leak runs (real runs on `device`)."""
    e = load_extras()
    out = {"sharded": [], "guard": [], "leaks": []}
    for params in sharded_grid(8, seed):
        row = {"config": params}
        for device_type in ("cpu", "cuda"):
            for strategy in STRATEGIES:
                if strategy == "fsdp2_offload" and device_type == "cpu":
                    continue
                key = f"{device_type}/{strategy}"
                try:
                    dcfg = e["DistributedConfig"].from_dict(dict(params, strategy=strategy, device="cpu"))
                    row[key] = _json_safe(e["estimate_sharded"](dcfg, device_type=device_type))
                except Exception as exc:  # noqa: BLE001 - an error is a result too
                    row[key] = _error(exc)
        out["sharded"].append(row)
    from experiments.core.config import ExperimentConfig

    for params in (
        {"layers": 3, "width": 32, "batch": 8, "checkpoint": "segments", "accum": 2},
        {"model": "cnn", "layers": 2, "width": 8, "image_size": 8, "batch": 2, "precision": "amp_bf16"},
        {
            "model": "transformer",
            "layers": 1,
            "width": 16,
            "heads": 2,
            "seq_len": 8,
            "batch": 2,
            "precision": "bf16",
            "checkpoint": "per_layer",
        },
    ):
        cfg = ExperimentConfig.from_dict(dict(params, device=device, seed=seed))
        try:
            out["guard"].append(_json_safe(e["check_gradients"](cfg)))
        except Exception as exc:  # noqa: BLE001
            out["guard"].append(_error(exc))
    for scenario in e["SCENARIOS"]:
        try:
            r = e["run_leak"](scenario, steps=4, device=device, batch=4, width=16, layers=2)
            out["leaks"].append(_json_safe({k: v for k, v in r.items() if k not in ("device", "started_at")}))
        except Exception as exc:  # noqa: BLE001
            out["leaks"].append(_error(exc))
    return out


def measure(root: Path, device: str, n: int, seed: int, threads: int, with_extras: bool = True) -> dict:
    os.environ["GPU_MEMORY_LAB_CACHE"] = tempfile.mkdtemp(prefix="layout-parity-")  # no workspaces measured yet
    layout, choices, ExperimentConfig, estimate, run_experiment = load_engine(root)
    import torch

    torch.set_num_threads(threads)  # CPU reductions split over threads may add in another order
    rows, t0 = [], time.perf_counter()
    configs = grid(choices, n, seed)
    for i, params in enumerate(configs):
        params = params | {"device": device}
        cfg = ExperimentConfig.from_dict(params)
        t = [time.perf_counter()]
        row = {"config": params, "estimate": {}}
        for device_type in ("cpu", "cuda"):
            row["estimate"][device_type] = _estimate(estimate, cfg, device_type)
            t.append(time.perf_counter())
        row["run"] = _run(run_experiment, cfg)
        t.append(time.perf_counter())
        rows.append(row)
        print(
            f"{i + 1}/{len(configs)} {params['model']} {params.get('precision')} {params.get('checkpoint')} "
            f"{params['optimizer']}/{params.get('optimizer_impl')} accum {params.get('accum')}: estimates "
            f"{t[1] - t[0]:.1f} + {t[2] - t[1]:.1f} s, run {t[3] - t[2]:.1f} s",
            flush=True,
        )
    t1 = time.perf_counter()
    extra = extras(device, seed) if layout == "packages" and with_extras else None
    print(f"extras (per-rank estimates, gradient checks, leak runs): {time.perf_counter() - t1:.1f} s", flush=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=False)
    meta = {
        "layout": layout,
        "root": str(root),
        "commit": commit.stdout.strip(),
        "device": device,
        "n": len(rows),
        "seed": seed,
        "threads": threads,
        "torch": torch.__version__,
        "seconds": round(time.perf_counter() - t0),
    }
    return {"meta": meta, "rows": rows, "extras": extra}


def differences(a, b, where: str = "", loss_rtol: float = 0.0) -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{where}.{k}: only in {'B' if k not in a else 'A'}")
            else:
                out += differences(a[k], b[k], f"{where}.{k}", loss_rtol)
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} items vs {len(b)}"]
        out = []
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            out += differences(x, y, f"{where}[{i}]", loss_rtol)
        return out
    if loss_rtol and (".losses[" in where or ".guard[" in where) and isinstance(a, float) and isinstance(b, float):
        return [] if abs(a - b) <= loss_rtol * max(abs(a), abs(b)) else [f"{where}: {a!r} vs {b!r}"]
    return [] if a == b and type(a) is type(b) else [f"{where}: {a!r} vs {b!r}"]


def _count(x) -> int:
    if isinstance(x, dict):
        return sum(_count(v) for v in x.values())
    if isinstance(x, list):
        return sum(_count(v) for v in x)
    return 1


def _canonical(data: dict) -> dict:
    """A census lists groups of equal size in the order of a set of tuples of strings, which differs from process to
    process (hash randomisation): compared as sets."""
    for leak in (data.get("extras") or {}).get("leaks", []):
        if (leak.get("census") or {}).get("groups"):
            leak["census"]["groups"] = sorted(leak["census"]["groups"], key=lambda g: json.dumps(g, sort_keys=True))
    return data


def compare(path_a: Path, path_b: Path) -> int:
    a, b = (_canonical(json.loads(p.read_text(encoding="utf-8"))) for p in (path_a, path_b))
    ma, mb = a["meta"], b["meta"]
    print(f"A: {ma['layout']} layout at {ma['commit'][:10]}, {ma['device']}, torch {ma['torch']}, {ma['n']} configs")
    print(f"B: {mb['layout']} layout at {mb['commit'][:10]}, {mb['device']}, torch {mb['torch']}, {mb['n']} configs")
    problems = [
        f"meta.{k}: {ma.get(k)!r} vs {mb.get(k)!r}"
        for k in ("device", "n", "seed", "threads", "torch")
        if ma.get(k) != mb.get(k)
    ]
    rtol = LOSS_RTOL_CUDA if ma["device"] == "cuda" else 0.0
    problems += differences(a["rows"], b["rows"], "rows", rtol)
    # The flat layout has no extras (they need the packages' entry points): compared only where both sides have them.
    both = a.get("extras") is not None and b.get("extras") is not None
    if both:
        problems += differences(a.get("extras"), b.get("extras"), "extras", rtol)
    elif a.get("extras") is not None or b.get("extras") is not None:
        print("extras: on one side only (a flat layout has none), not compared")
    if problems:
        print(f"PARITY FAILED: {len(problems)} differences")
        for p in problems[:200]:
            print("  " + p)
        return 1
    failed = sum(1 for r in a["rows"] if "error" in r["run"])
    oom = sum(1 for r in a["rows"] if r["run"].get("oom"))
    print(
        f"identical: {len(a['rows'])} configurations ({oom} ran out of memory, {failed} refused or failed, "
        f"the same way on both sides), {_count(a['rows'])} values compared"
        + (f"; extras: {_count(a['extras'])} values" if both else "")
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--root",
        type=Path,
        default=Path(__file__).resolve().parent.parent,
        help="the checkout whose engine is measured (default: this one)",
    )
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the real runs go")
    ap.add_argument("--n", type=int, default=45, help="configurations (at least 40)")
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1, help="CPU threads (fixed, so CPU sums add in one order)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--no-extras", action="store_true", help="the grid only (what a flat layout has), no extras")
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("A.json", "B.json"))
    args = ap.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if args.n < 40:
        ap.error(f"--n: got {args.n}; at least 40 configurations")
    if not args.out:
        ap.error("--out is required (or --compare A.json B.json)")
    data = measure(args.root.resolve(), args.device, args.n, args.seed, args.threads, with_extras=not args.no_extras)
    args.out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(
        f"wrote {args.out}: {data['meta']['n']} configurations in {data['meta']['seconds']} s ({data['meta']['layout']})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
