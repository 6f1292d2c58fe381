"""Models of one's own at full size on a GPU: a plain training loop measures each case's steady-state peak and
`memory_reserved`, beside the CPU-only replay's estimate (experiments/estimate/estimator.py); prints a table and
writes JSON. Each measurement runs in a process of its own (one case's cached blocks and cuBLAS workspaces are not
in the next one's figures); the replays run meanwhile, in parallel, on the CPU.

    python benchmarks/model_presets.py                                   # on the H200: every case, about 3 minutes
    python benchmarks/model_presets.py --only llama3-8b-bf16-fused       # one case
    python benchmarks/model_presets.py --device cpu --tiny               # the same loop on the CPU, tiny variants
    python benchmarks/model_presets.py --estimates lessons/yourmodel/estimates.json   # the page's CPU replays
    python benchmarks/model_presets.py --refresh lessons/yourmodel/h200_presets.json  # today's CPU-only estimates

The loop is written out plainly (zero_grad(set_to_none=True), the model's own loss under autocast where the
precision asks, backward, step), not the engine's train_step. As DESIGN.md measures: the cuBLAS/cuBLASLt workspaces
are created first and are part of the baseline; step 1 creates the optimizer state; before step 2 synchronize,
gc.collect() and reset_peak_memory_stats(); max_memory_allocated() - baseline in step 2 is the steady-state peak.
On the CPU the engine's tracker counts the same loop's storages (the check of this script, tests/engine).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import gc
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from course.own_model import diffs  # noqa: E402 - after the path (torch-free: the recorded rows' differences)

# id -> (preset, overrides, levers). Models that do not fit one H200 whole (Llama-3-70B, Mixtral-8x7B) run with 4
# of their layers: the same layer shapes, so the per-layer figures are checked all the same.
CASES = {
    "llama3-8b-bf16-fused": ("llama3-8b", "", {"optimizer_impl": "fused"}),
    "llama3-8b-bf16-fused-ckpt": ("llama3-8b", "", {"optimizer_impl": "fused", "checkpoint": "per_layer"}),
    "llama3-8b-bf16-foreach": ("llama3-8b", "", {"optimizer_impl": "foreach"}),
    "mistral-7b-bf16-fused": ("mistral-7b", "", {"optimizer_impl": "fused"}),
    "llama3-70b-4layers-bf16-fused": ("llama3-70b", "layers=4", {"optimizer_impl": "fused"}),
    "mixtral-4layers-bf16-fused": ("mixtral-8x7b", "layers=4", {"optimizer_impl": "fused"}),
    "gpt2-amp-bf16": ("gpt2", "", {}),
    "gpt2-amp-bf16-ckpt": ("gpt2", "", {"checkpoint": "per_layer"}),
    "bert-base-amp-bf16": ("bert-base", "", {}),
    "vit-b16-amp-bf16": ("vit-b16", "", {}),
    "resnet50-fp32": ("resnet50", "", {}),
    # Heads other than causal LM (hf:TYPE:HEAD, the model type's own default configuration): encoder-decoders, whose
    # decoders make their masks with torch.ones (quirk uniform_masks), and classifiers.
    "t5-seq2seq-amp-bf16": ("hf:t5:seq2seq_lm", "", {"batch": 16, "seq_len": 512, "precision": "amp_bf16"}),
    "bart-seq2seq-amp-bf16": ("hf:bart:seq2seq_lm", "", {"batch": 8, "seq_len": 1024, "precision": "amp_bf16"}),
    "marian-seq2seq-fp32-ckpt": (
        "hf:marian:seq2seq_lm",
        "",
        {"batch": 16, "seq_len": 256, "precision": "fp32", "checkpoint": "per_layer"},
    ),
    "bert-cls-amp-bf16": (
        "hf:bert:sequence_classification",
        "",
        {"batch": 32, "seq_len": 512, "precision": "amp_bf16"},
    ),
    "llama-4layers-cls-bf16": (
        "hf:llama:sequence_classification",
        "layers=4",
        {"batch": 4, "seq_len": 2048, "precision": "bf16", "optimizer_impl": "fused"},
    ),
}
# The page's estimates (CPU replays for CUDA): the Llama-3-8B shape's levers at two sequence lengths, and GPT-2's
# mixed precision by optimizer implementation.
ESTIMATES = {
    "llama3-8b-s2048-fused": ("llama3-8b", {"optimizer_impl": "fused"}),
    "llama3-8b-s2048-fused-ckpt": ("llama3-8b", {"optimizer_impl": "fused", "checkpoint": "per_layer"}),
    "llama3-8b-s2048-foreach": ("llama3-8b", {"optimizer_impl": "foreach"}),
    "llama3-8b-s8192-fused": ("llama3-8b", {"optimizer_impl": "fused", "seq_len": 8192}),
    "llama3-8b-s8192-fused-ckpt": (
        "llama3-8b",
        {"optimizer_impl": "fused", "seq_len": 8192, "checkpoint": "per_layer"},
    ),
    "llama3-8b-s8192-foreach": ("llama3-8b", {"optimizer_impl": "foreach", "seq_len": 8192}),
    "gpt2-amp-fused": ("gpt2", {"optimizer_impl": "fused"}),
    "gpt2-amp-foreach": ("gpt2", {"optimizer_impl": "foreach"}),
}


def config(preset: str, overrides: str, levers: dict, tiny: bool, device: str):
    from experiments.core.config import ExperimentConfig
    from experiments.estimate.estimator import preset_defaults

    source = preset if ":" in preset else f"preset:{preset}" + (":tiny" if tiny else "")
    data = {**preset_defaults(source), "model_source": source, "model_overrides": overrides, **levers}
    return ExperimentConfig.from_dict({**data, "device": device, "steps": 2, "timing_steps": 0})


def _warm_cublas(dev) -> None:
    """The cuBLAS and cuBLASLt workspaces of both threads (forward and autograd's backward): part of the baseline."""
    import torch

    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        w = torch.randn(64, 64, device=dev, dtype=dtype, requires_grad=True)
        b = torch.randn(64, device=dev, dtype=dtype, requires_grad=True)
        (w @ w).sum().backward()
        for x in (w, w.view(4, 16, 64)):
            torch.nn.functional.linear(x, w, b).sum().backward()
    torch.cuda.synchronize()


def plain_step(cfg, spec, model, opt, scaler, batch, amp, device_type: str) -> None:
    """One step of the plain loop a user writes: zero_grad(set_to_none=True), the model's own loss under autocast
    where the precision asks, backward (scaled for fp16), the optimizer's step. benchmarks/fits_boundary.py runs it
    too."""
    import torch

    opt.zero_grad(set_to_none=True)
    with torch.amp.autocast(device_type, dtype=amp) if amp else contextlib.nullcontext():
        loss = spec.loss(cfg, model, *batch)
    (scaler.scale(loss) if scaler else loss).backward()
    del loss
    if scaler:
        scaler.step(opt)
        scaler.update()
    else:
        opt.step()


@contextlib.contextmanager
def plain_loop(cfg, dev):
    """The plain loop's parts on `dev` under cfg's float32 settings: (spec, model, optimizer, batch, autocast dtype),
    the model built as the engine builds it (checkpointing included), seeded as the engine seeds it.
    benchmarks/op_memory.py and held_by_line.py step it with plain_step."""
    import torch

    from experiments.training.models import build_model, spec_for
    from experiments.training.strategies import AMP_DTYPES, float32_precision, make_optimizer

    spec = spec_for(cfg)
    with float32_precision(cfg):
        torch.manual_seed(cfg.seed)
        model = build_model(cfg, dev, spec)
        opt = make_optimizer(cfg, model.parameters())
        yield spec, model, opt, spec.batch(cfg, dev, cfg.seed + 1), AMP_DTYPES.get(cfg.precision)


def measure(cfg) -> dict:
    """The plain loop on cfg.device; on the CPU the engine's tracker counts its storages."""
    import torch

    from experiments.measure.tracker import MemoryTracker
    from experiments.training.models import spec_for
    from experiments.training.strategies import AMP_DTYPES, float32_precision, make_optimizer

    dev = torch.device(cfg.device)
    cuda = dev.type == "cuda"
    if cuda:
        _warm_cublas(dev)
        gc.collect()
        torch.cuda.empty_cache()
    tracker = MemoryTracker() if not cuda else contextlib.nullcontext()
    baseline = torch.cuda.memory_allocated() if cuda else 0
    spec = spec_for(cfg)
    amp = AMP_DTYPES.get(cfg.precision)
    times, peaks = [], []
    with float32_precision(cfg), tracker:
        torch.manual_seed(cfg.seed)
        model = spec.build(cfg, dev)
        spec.enable_checkpointing(model, cfg)
        opt = make_optimizer(cfg, model.parameters())
        scaler = torch.amp.GradScaler(dev.type) if cfg.precision == "amp_fp16" else None
        inputs, targets = spec.batch(cfg, dev, cfg.seed + 1)
        for _step in (1, 2, 3):
            if cuda:
                torch.cuda.synchronize()
                gc.collect()
                torch.cuda.reset_peak_memory_stats()
            else:
                tracker.peak = tracker.current
            t0 = time.perf_counter()
            plain_step(cfg, spec, model, opt, scaler, (inputs, targets), amp, dev.type)
            if cuda:
                torch.cuda.synchronize()
            times.append(round(time.perf_counter() - t0, 3))
            peaks.append(torch.cuda.max_memory_allocated() - baseline if cuda else tracker.peak)
    out = {"measured_peak_bytes": peaks[1], "step1_peak_bytes": peaks[0], "step3_peak_bytes": peaks[2], "step_s": times}
    if cuda:
        out.update(
            reserved_bytes=torch.cuda.max_memory_reserved(),
            baseline_bytes=baseline,
            device=torch.cuda.get_device_name(),
            torch=torch.__version__,
        )
    return out


def predict(cfg, device_type: str) -> dict:
    """The CPU-only replay's estimate of step 2 (the full replay: the allocator model's reserved figure needs it)."""
    from experiments.estimate.estimator import estimate_or_refusal

    r = estimate_or_refusal(cfg, device_type=device_type, fast=False)
    if not r["predicted"]:
        return {"cannot_predict": r["cannot_predict"]["message"]}
    out = {
        "estimate_peak_bytes": _step2_peak(r),
        "estimate_reserved_bytes": r["reserved_bytes"],
        "parameters": r["parameters"],
        "replay_seconds": r["seconds"],
    }
    import torch

    if cfg.device == "cuda" and torch.cuda.is_available():
        # The same replay with the kernels' scratch memory (cuDNN, cuBLAS workspaces) measured on this GPU: what a
        # GPU server's page shows once its worker has measured them; a CPU cannot measure them.
        from experiments.measure.fits import measure_workspaces

        scratch = measure_workspaces(r["signatures"], torch.device("cuda"))
        s = estimate_or_refusal(cfg, device_type=device_type, fast=False, transients=scratch)
        out.update(scratch_peak_bytes=_step2_peak(s), scratch_reserved_bytes=s["reserved_bytes"])
    return out


def _step2_peak(r: dict) -> int:
    return max(p["peak_bytes"] for p in r["phases"] if p["step"] == 2)


def _child(what: str, case: str, tiny: bool, device: str) -> dict:
    cmd = [sys.executable, __file__, "--child", what, "--only", case, "--device", device] + (["--tiny"] if tiny else [])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if r.returncode:
        return {f"{what}_error": (r.stderr.strip().splitlines() or ["?"])[-1][:400]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def refresh(path: str) -> None:
    """Today's CPU-only estimates of a recorded file's cases, beside the measurements kept as they were (no GPU: the
    replay runs here; the figures with scratch memory measured on the GPU stay those of the recording)."""
    data = json.loads(Path(path).read_text())
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        predicted = [pool.submit(_child, "predict", row["case"], False, "cuda") for row in data["rows"]]
    for row, future in zip(data["rows"], predicted, strict=True):
        got = future.result()
        if "estimate_peak_bytes" not in got:
            raise SystemExit(f"{row['case']}: {got}")
        row.update({k: got[k] for k in ("estimate_peak_bytes", "estimate_reserved_bytes") if k in got})
        row.update(diffs(row))
        print(f"{row['case']:34} {row.get('peak_diff_percent')}", flush=True)
    Path(path).write_text(json.dumps(data, indent=1) + "\n")


def compare(cases: list[str], tiny: bool, device: str) -> list[dict]:
    device_type = "cuda" if device == "cuda" else "cpu"
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        predicted = {c: pool.submit(_child, "predict", c, tiny, device_type) for c in cases}
        rows = []
        for case in cases:
            row = {"case": case, **_child("measure", case, tiny, device), **predicted[case].result()}
            row.update(diffs(row))
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def estimates() -> dict:
    from experiments.estimate.estimator import estimate

    out = {}
    for name, (preset, levers) in ESTIMATES.items():
        r = estimate(config(preset, "", levers, False, "cpu"), device_type="cuda")
        keep = (
            "peak_bytes",
            "peak_phase",
            "peak_step",
            "categories",
            "steady",
            "parameters",
            "bytes_per_parameter",
            "formula_bytes",
        )
        step = max(p["peak_bytes"] for p in r["phases"] if p["phase"] == "optimizer_step" and p["step"] == 2)
        out[name] = {**{k: r[k] for k in keep}, "config": r["config"], "optimizer_step_peak_bytes": step}
        print(f"{name:30} {r['peak_bytes'] / 2**30:9.3f} GiB  {r['path']}  {r['seconds']} s", flush=True)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", action="append", choices=list(CASES))
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--tiny", action="store_true", help="the presets' CPU-sized variants")
    p.add_argument("--out", default=str(ROOT / "lessons" / "yourmodel" / "h200_presets.json"))
    p.add_argument("--estimates", metavar="PATH", help="write the page's CPU replays there instead")
    p.add_argument("--child", choices=("measure", "predict"))
    p.add_argument("--refresh", metavar="PATH", help="today's CPU-only estimates into a recorded file (no GPU)")
    a = p.parse_args(argv)
    if a.refresh:
        refresh(a.refresh)
        return 0
    if a.estimates:
        Path(a.estimates).write_text(json.dumps(estimates(), indent=1) + "\n", encoding="utf-8")
        return 0
    if a.child:
        (case,) = a.only
        preset, overrides, levers = CASES[case]
        cfg = config(preset, overrides, levers, a.tiny, a.device)
        print(json.dumps(measure(cfg) if a.child == "measure" else predict(cfg, a.device)))
        return 0
    t0 = time.perf_counter()
    rows = compare(a.only or list(CASES), a.tiny, a.device)
    nan = float("nan")
    print(f"\n{'case':34} {'measured GiB':>13} {'estimate GiB':>13} {'diff %':>8} {'reserved diff %':>16}", end="")
    print(f" {'+scratch diff %':>16} {'+scratch reserved %':>20}")
    for row in rows:
        m, e = row.get("measured_peak_bytes"), row.get("estimate_peak_bytes")
        print(
            f"{row['case']:34} {m / 2**30 if m else nan:13.4f} {e / 2**30 if e else nan:13.4f} "
            f"{row.get('peak_diff_percent', nan):8.3f} {row.get('reserved_diff_percent', nan):16.3f} "
            f"{row.get('scratch_peak_diff_percent', nan):16.3f} {row.get('scratch_reserved_diff_percent', nan):20.3f}"
        )
    Path(a.out).write_text(json.dumps({"rows": rows, "seconds": round(time.perf_counter() - t0, 1)}, indent=1) + "\n")
    print(f"wrote {a.out} in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
