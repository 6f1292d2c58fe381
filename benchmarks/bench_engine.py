"""Benchmarks on a CUDA device: engine overhead vs a plain loop, achieved TFLOP/s, estimator error.

    python benchmarks/bench_engine.py --out docs/benchmarks/h200.json
Prints a readable report and writes the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.core.config import ExperimentConfig  # noqa: E402
from experiments.core.units import MIB  # noqa: E402
from experiments.measure.run import run_experiment  # noqa: E402
from experiments.measure.timing import time_steps  # noqa: E402
from experiments.training.step import build_state  # noqa: E402
from experiments.training.strategies import float32_precision  # noqa: E402


def grid() -> list[ExperimentConfig]:
    out = []
    mlp = dict(model="mlp", layers=16, width=2048)
    for batch in (64, 8192):
        for precision in ("fp32", "amp_bf16", "amp_fp16", "bf16"):
            out.append(dict(mlp, batch=batch, precision=precision))
        for ck in ("per_layer", "segments"):
            out.append(dict(mlp, batch=batch, checkpoint=ck))
        out.append(dict(mlp, batch=batch, accum=4))
        for opt, impl in (
            ("sgd", "default"),
            ("sgd_momentum", "default"),
            ("adamw", "default"),
            ("adam", "for-loop"),
            ("adam", "fused"),
        ):
            out.append(dict(mlp, batch=batch, optimizer=opt, optimizer_impl=impl))
    out.append(dict(mlp, batch=16384, precision="amp_bf16", checkpoint="segments", accum=2))
    out.append(dict(model="mlp", layers=8, width=8192, batch=16384, precision="amp_bf16"))
    tf = dict(model="transformer", layers=8, width=1024, heads=16, seq_len=1024)
    for batch in (4, 16):
        for precision in ("fp32", "amp_bf16", "bf16"):
            out.append(dict(tf, batch=batch, precision=precision))
        out.append(dict(tf, batch=batch, precision="amp_bf16", checkpoint="segments"))
        out.append(dict(tf, batch=batch, accum=2))
    cnn = dict(model="cnn", layers=6, width=64, image_size=224)
    for batch in (8, 32):
        for precision in ("fp32", "amp_bf16"):
            out.append(dict(cnn, batch=batch, precision=precision))
        out.append(dict(cnn, batch=batch, checkpoint="segments"))
    return [ExperimentConfig(device="cuda", steps=2, timing_steps=0, **c) for c in out]


def plain_step_times(cfg: ExperimentConfig, n: int) -> list[float]:
    """The same model and data, trained by a bare loop written inline (no engine code in the step)."""
    s = build_state(cfg, torch.device("cuda"))
    model, opt, scaler, x, y = s.model, s.optimizer, s.scaler, s.inputs["x"], s.targets["y"]
    amp = {"amp_bf16": torch.bfloat16, "amp_fp16": torch.float16}.get(cfg.precision)
    loss_of = torch.nn.functional.cross_entropy if cfg.model == "cnn" else torch.nn.functional.mse_loss
    events = []
    for i in range(n + 2):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        opt.zero_grad(set_to_none=True)
        with torch.amp.autocast("cuda", dtype=amp or torch.float32, enabled=amp is not None):
            loss = loss_of(model(x), y)
        (scaler.scale(loss) if scaler else loss).backward()
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        end.record()
        if i >= 2:  # two warm-up steps; then record every step and synchronize once, as the engine does
            events.append((start, end))
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in events]


def engine_step_times(cfg: ExperimentConfig, n: int) -> list[float]:
    state = build_state(cfg, torch.device("cuda"))
    time_steps(state, 2)
    return time_steps(state, n)


def overhead(cfgs, rounds=5, n=20) -> list[dict]:
    rows = []
    for cfg in cfgs:
        e_all, p_all = [], []
        with float32_precision(cfg):
            for _ in range(rounds):  # interleaved, so clock drift hits both alike
                e_all += engine_step_times(cfg, n)
                p_all += plain_step_times(cfg, n)
        e, p = statistics.median(e_all), statistics.median(p_all)
        rows.append({"config": _short(cfg), "engine_ms": e, "plain_ms": p, "overhead_pct": 100 * (e / p - 1)})
    return rows


def _short(cfg: ExperimentConfig) -> str:
    d = cfg.to_dict()
    keys = [
        "model",
        "layers",
        "width",
        "batch",
        "seq_len",
        "precision",
        "checkpoint",
        "accum",
        "optimizer",
        "optimizer_impl",
    ]
    default = ExperimentConfig().to_dict()
    return " ".join(f"{k}={d[k]}" for k in keys if k in ("model", "layers", "width", "batch") or d[k] != default[k])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--skip-grid", action="store_true")
    args = ap.parse_args()
    assert torch.cuda.is_available(), "needs CUDA"
    report = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d"),
        "command": "python benchmarks/bench_engine.py " + " ".join(sys.argv[1:]),
    }

    print(f"# {report['device']}, torch {report['torch']}")
    ov_cfgs = [
        ExperimentConfig(device="cuda", model="mlp", layers=16, width=2048, batch=b, precision=p)
        for b, p in ((64, "fp32"), (8192, "fp32"), (8192, "amp_bf16"))
    ]
    ov_cfgs.append(
        ExperimentConfig(
            device="cuda",
            model="transformer",
            layers=8,
            width=1024,
            heads=16,
            seq_len=1024,
            batch=8,
            precision="amp_bf16",
        )
    )
    report["overhead"] = overhead(ov_cfgs)
    print("\n## Step-time overhead of the engine vs a plain loop (median of 100 steps each, CUDA events)")
    for r in report["overhead"]:
        print(
            f"{r['config']:<70} engine {r['engine_ms']:8.3f} ms  plain {r['plain_ms']:8.3f} ms  "
            f"overhead {r['overhead_pct']:+.2f}%"
        )

    big = ExperimentConfig(
        device="cuda", model="mlp", layers=8, width=8192, batch=16384, precision="amp_bf16", steps=2, timing_steps=30
    )
    r = run_experiment(big)
    report["tflops_amp_bf16_largest_mlp"] = {
        "config": _short(big),
        "tflops": r["tflops"],
        "step_ms_median": r["step_ms"]["median"],
        "flops_per_step": r["flops_per_step"],
    }
    print(
        f"\n## Achieved TFLOP/s, amp_bf16, {_short(big)}: {r['tflops']:.1f} TFLOP/s "
        f"(median step {r['step_ms']['median']:.2f} ms, {r['flops_per_step'] / 1e12:.2f} TFLOP per step)"
    )

    if not args.skip_grid:
        rows = []
        for cfg in grid():
            res = run_experiment(cfg)
            measured = res["peak_bytes"] - res["baseline_bytes"]
            est = res["estimate"]["peak_bytes"]
            rows.append(
                {
                    "config": _short(cfg),
                    "measured_mib": measured / MIB,
                    "estimate_mib": est / MIB,
                    "error_pct": 100 * (est / measured - 1),
                    "measured_phase": res["peak_phase"]["phase"],
                    "estimate_phase": res["estimate"]["peak_phase"],
                    "oom": res["oom"] is not None,
                }
            )
        errs = sorted(abs(r["error_pct"]) for r in rows)
        report["estimator"] = {
            "configs": len(rows),
            "median_abs_error_pct": statistics.median(errs),
            "worst_abs_error_pct": errs[-1],
            "within_10pct": sum(e <= 10 for e in errs),
            "rows": rows,
        }
        print(f"\n## Estimator vs measured peak over {len(rows)} configurations")
        for r in rows:
            print(
                f"{r['config']:<90} measured {r['measured_mib']:10.1f} MiB  estimate {r['estimate_mib']:10.1f} MiB  "
                f"{r['error_pct']:+6.1f}%  ({r['measured_phase']}/{r['estimate_phase']})"
            )
        e = report["estimator"]
        print(
            f"median |error| {e['median_abs_error_pct']:.1f}%, worst {e['worst_abs_error_pct']:.1f}%, "
            f"{e['within_10pct']}/{e['configs']} within 10%"
        )
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
