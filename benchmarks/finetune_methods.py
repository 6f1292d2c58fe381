"""Fine-tuning methods at full size on a GPU: a plain loop written as peft's and bitsandbytes' users write it (not the
engine's recipe) measures each case's steady-state peak, `memory_reserved`, what the driver sees (paged optimizer
state lives in CUDA managed memory, outside the caching allocator) and the step time, beside the CPU-only replay's
estimate (experiments/estimate/estimator.py). Each case runs in a process of its own; the replays run meanwhile, in
parallel, on the CPU.

    python benchmarks/finetune_methods.py                               # on the H200: every case
    python benchmarks/finetune_methods.py --only llama3-8b-lora         # one case
    python benchmarks/finetune_methods.py --device cpu --tiny           # the same loop on the CPU, tiny variants
    python benchmarks/finetune_methods.py --estimates lessons/finetune/estimates.json   # the lesson's CPU replays

The loop: `AutoModelForCausalLM.from_config(config, dtype=bfloat16)` on the device; `activation_checkpointing_enable`
(non-reentrant, every n-th layer) where the case checkpoints; `get_peft_model(model, LoraConfig(...))` for LoRA (the
targets named as tutorials name them); the optimizer built directly (torch.optim.AdamW(fused=True) or bitsandbytes'
class) on the parameters that require gradients; each step zero_grad(set_to_none=True), the model's own loss under
`save_on_cpu(pin_memory=True)` where the case offloads, backward, step. As DESIGN.md measures: cuBLAS workspaces first
(the baseline), step 1 creates the optimizer state, step 2's `max_memory_allocated() - baseline` is the steady peak.
On the CPU the engine's tracker counts the same loop's storages (tests/engine/test_finetune_bench.py).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import gc
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ATTENTION = ["q_proj", "k_proj", "v_proj", "o_proj"]  # what LLaMA and Mistral tutorials pass as target_modules
# id -> (preset, levers). Each method on two presets at full size, batch 1, seq 2048, pure bf16.
METHODS = {
    "lora": {"finetune": "lora"},
    "lora-ckpt": {"finetune": "lora", "checkpoint": "per_layer"},
    "lora-ckpt2-all-8bit": {
        "finetune": "lora",
        "lora_targets": "all_linear",
        "checkpoint": "per_layer",
        "checkpoint_every": 2,
        "optimizer": "adamw8bit",
    },
    "lora-ckpt-offload": {"finetune": "lora", "checkpoint": "per_layer", "offload_activations": True},
    "qlora": {"finetune": "qlora"},
    "qlora-ckpt-all-paged8bit": {
        "finetune": "qlora",
        "lora_targets": "all_linear",
        "checkpoint": "per_layer",
        "optimizer": "paged_adamw8bit",
    },
    "int8": {"finetune": "int8"},  # on CUDA the estimate names LLM.int8's outliers as not predicted
    "full-8bit": {"optimizer": "adamw8bit"},
    "full-paged8bit": {"optimizer": "paged_adamw8bit"},
    "lora-paged32": {"finetune": "lora", "optimizer": "paged_adamw"},  # LoRA's: a paged state small beside the card
    "lora-all-paged32": {"finetune": "lora", "lora_targets": "all_linear", "optimizer": "paged_adamw"},
    "lora-offload": {"finetune": "lora", "offload_activations": True},  # offloading where nothing is recomputed
}
CASES = {f"{p}-{m}": (p, levers) for p in ("llama3-8b", "mistral-7b") for m, levers in METHODS.items()}
# The "Fine-tuning memory" lesson's estimates (CPU replays for CUDA, lessons/finetune/estimates.json): one model, each
# method, with and without checkpointing, and two at a shorter sequence.
LESSON_ESTIMATES = {
    "full": {"optimizer_impl": "fused"},
    "full-8bit": {"optimizer": "adamw8bit"},
    "lora": {"finetune": "lora"},
    "lora-ckpt": {"finetune": "lora", "checkpoint": "per_layer"},
    "lora-ckpt-offload": {"finetune": "lora", "checkpoint": "per_layer", "offload_activations": True},
    "qlora": {"finetune": "qlora"},
    "qlora-ckpt": {"finetune": "qlora", "checkpoint": "per_layer"},
    "lora-s512": {"finetune": "lora", "seq_len": 512},
    "qlora-s512": {"finetune": "qlora", "seq_len": 512},
    "lora-paged32": {"finetune": "lora", "optimizer": "paged_adamw"},
    "lora-all-paged32": {"finetune": "lora", "lora_targets": "all_linear", "optimizer": "paged_adamw"},
    "lora-offload": {"finetune": "lora", "offload_activations": True},
}
LESSON_PRESET = "llama3-8b"


def config(preset: str, levers: dict, tiny: bool, device: str):
    from experiments.core.config import ExperimentConfig
    from experiments.core.finetune import BNB_OPTIMIZERS
    from experiments.estimate.estimator import preset_defaults

    source = f"preset:{preset}" + (":tiny" if tiny else "")
    data = {**preset_defaults(source), "model_source": source, **({} if tiny else {"batch": 1}), **levers}
    if data.get("optimizer") in BNB_OPTIMIZERS:
        data["optimizer_impl"] = "default"
    return ExperimentConfig.from_dict({**data, "device": device, "steps": 2, "timing_steps": 0})


def build(cfg, dev):
    """The model as a peft user builds it, on `dev`: transformers from its config, checkpointing, LoRA."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from experiments.core.model_sources import parse_source, preset_config, presets

    _kind, name, size = parse_source(cfg.model_source)
    model_cfg, _levers = preset_config(name, size == "tiny")
    hf = AutoConfig.for_model(presets()[name]["source"]["model_type"], **model_cfg)
    if cfg.finetune in ("qlora", "int8"):
        model = _load_quantized(cfg, hf)
    else:
        with torch.device(dev):
            model = AutoModelForCausalLM.from_config(hf, dtype=torch.bfloat16)
    model.train()
    if cfg.checkpoint == "per_layer":
        kwargs = {"use_reentrant": False}
        if hasattr(model, "activation_checkpointing_enable"):  # its name from transformers 5.18 on
            model.activation_checkpointing_enable(
                activation_checkpointing_kwargs=kwargs, every_n_layers=cfg.checkpoint_every
            )
        else:
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs=kwargs, every_n_layers=cfg.checkpoint_every
            )
    if cfg.finetune != "full":
        from peft import LoraConfig, get_peft_model

        targets = "all-linear" if cfg.lora_targets == "all_linear" else ATTENTION
        lora = LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, target_modules=targets, task_type="CAUSAL_LM")
        model = get_peft_model(model, lora)
    return model, hf.vocab_size


def _load_quantized(cfg, hf):
    """QLoRA (4-bit) or LLM.int8 (8-bit) as tutorials load it: from_pretrained with a BitsAndBytesConfig (random weights
    saved first, so no checkpoint is downloaded), then peft's prepare_model_for_kbit_training (checkpointing is the
    case's own lever)."""
    import torch
    from peft import prepare_model_for_kbit_training
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    if cfg.finetune == "int8":
        quant = BitsAndBytesConfig(load_in_8bit=True)
    else:
        quant = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type=cfg.quant_type,
            bnb_4bit_use_double_quant=cfg.double_quant,
            bnb_4bit_compute_dtype=torch.bfloat16,
        )
    device = cfg.device if cfg.device == "cpu" else 0
    model = AutoModelForCausalLM.from_pretrained(
        _checkpoint(hf), quantization_config=quant, dtype=torch.bfloat16, device_map={"": device}
    )
    return prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)


def _checkpoint(hf) -> Path:
    """A random bf16 checkpoint of this shape, written once and reused by every quantized case (16 GB for Llama-3-8B:
    writing it was most of such a case's time); each case's process still loads it as a user would."""
    import hashlib
    import tempfile

    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    key = hashlib.sha1((transformers.__version__ + hf.to_json_string()).encode()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / f"gml-finetune-{hf.model_type}-{key}"
    if not (folder / "config.json").exists():
        partial = folder.with_name(f"{folder.name}.{os.getpid()}")  # two cases at once: the first to finish wins
        with torch.device("cpu"):
            AutoModelForCausalLM.from_config(hf, dtype=torch.bfloat16).save_pretrained(partial)
        try:
            partial.rename(folder)
        except OSError:
            shutil.rmtree(partial, ignore_errors=True)
    return folder


def optimizer(cfg, params):
    import torch

    params = [p for p in params if p.requires_grad]
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01, fused=cfg.optimizer_impl == "fused")
    import bitsandbytes as bnb

    cls = {
        "adamw8bit": bnb.optim.AdamW8bit,
        "paged_adamw": bnb.optim.PagedAdamW,
        "paged_adamw8bit": bnb.optim.PagedAdamW8bit,
    }
    return cls[cfg.optimizer](params, lr=1e-4, weight_decay=0.01)


def step(model, opt, ids, offload=None) -> None:
    """One training step as a peft user writes it: zero_grad(set_to_none=True), the model's own loss (under the
    `offload` context, save_on_cpu, where the case offloads), backward, the optimizer's step."""
    opt.zero_grad(set_to_none=True)
    with offload or contextlib.nullcontext():
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    del loss
    opt.step()


def measure(cfg) -> dict:
    """The plain loop on cfg.device; on the CPU the engine's tracker counts its storages."""
    import torch

    from experiments.measure.tracker import MemoryTracker

    dev = torch.device(cfg.device)
    cuda = dev.type == "cuda"
    if cuda:
        from benchmarks.model_presets import _warm_cublas

        _warm_cublas(dev)
        gc.collect()
        torch.cuda.empty_cache()
    import peft  # noqa: F401 - imported before counting (their imports make small tensors)
    import transformers  # noqa: F401

    if cfg.optimizer != "adamw" or cfg.finetune in ("qlora", "int8"):
        from bitsandbytes import functional

        # bitsandbytes' process-lifetime caches (its 256-value map for the scales, 1 KiB; the CPU kernel's code
        # bounds) are made before the baseline, as the engine makes them before its first phase.
        functional.quantize_4bit(torch.zeros(64, device=dev), quant_type=cfg.quant_type, compress_statistics=True)
    tracker = MemoryTracker() if not cuda else contextlib.nullcontext()
    baseline = torch.cuda.memory_allocated() if cuda else 0
    # nvidia-smi's count below starts here; reserved_bytes counts from the process's start.
    reserved_before = torch.cuda.memory_reserved() if cuda else 0
    free_before = torch.cuda.mem_get_info()[0] if cuda else None
    times, peaks, driver = [], [], []
    with tracker:
        torch.manual_seed(cfg.seed)
        model, vocab = build(cfg, dev)
        opt = optimizer(cfg, model.parameters())
        ids = torch.randint(0, vocab, (cfg.batch, cfg.seq_len), generator=torch.Generator().manual_seed(1)).to(dev)
        offload = torch.autograd.graph.save_on_cpu(pin_memory=True) if cfg.offload_activations else None
        for _step in (1, 2, 3):
            if cuda:
                torch.cuda.synchronize()
                gc.collect()
                torch.cuda.reset_peak_memory_stats()
            else:
                tracker.peak = tracker.current
            t0 = time.perf_counter()
            step(model, opt, ids, offload)
            if cuda:
                torch.cuda.synchronize()
                driver.append(free_before - torch.cuda.mem_get_info()[0])
            times.append(round(time.perf_counter() - t0, 3))
            peaks.append(torch.cuda.max_memory_allocated() - baseline if cuda else tracker.peak)
    out = {"measured_peak_bytes": peaks[1], "step1_peak_bytes": peaks[0], "step3_peak_bytes": peaks[2], "step_s": times}
    if cuda:
        out.update(
            reserved_bytes=torch.cuda.max_memory_reserved(),
            driver_used_bytes=driver[1],  # what nvidia-smi would add for this process after step 2
            baseline_bytes=baseline,
            reserved_before_bytes=reserved_before,
            device=torch.cuda.get_device_name(),
            torch=torch.__version__,
        )
    return out


def predict(cfg, device_type: str) -> dict:
    """The CPU-only replay's estimate of step 2 (the full replay: the reserved figure needs it)."""
    from experiments.estimate.estimator import estimate_or_refusal

    r = estimate_or_refusal(cfg, device_type=device_type, fast=False)
    if not r["predicted"]:
        return {"cannot_predict": r["cannot_predict"]["message"]}
    return {
        "estimate_peak_bytes": max(p["peak_bytes"] for p in r["phases"] if p["step"] == 2),
        "estimate_reserved_bytes": r["reserved_bytes"],
        "estimate_paged_bytes": r["paged_bytes"],
        "estimate_host_peak_bytes": r["host_peak_bytes"],
        "trainable_parameters": r["trainable_parameters"],
        "replay_seconds": r["seconds"],
    }


def lesson_estimates() -> dict:
    from experiments.estimate.estimator import estimate

    keep = ("peak_bytes", "peak_phase", "peak_step", "categories", "steady", "parameters", "trainable_parameters")
    out = {}
    for name, levers in LESSON_ESTIMATES.items():
        r = estimate(config(LESSON_PRESET, levers, False, "cuda"), device_type="cuda", fast=False)
        out[name] = {
            **{k: r[k] for k in keep},
            "reserved_bytes": r["reserved_bytes"],
            "paged_bytes": r["paged_bytes"],
            "host_peak_bytes": r["host_peak_bytes"],
            "config": r["config"],
        }
        print(f"{name:20} {r['peak_bytes'] / 2**30:9.3f} GiB  {r['seconds']} s", flush=True)
    return out


def _child(what: str, case: str, tiny: bool, device: str) -> dict:
    cmd = [sys.executable, __file__, "--child", what, "--only", case, "--device", device] + (["--tiny"] if tiny else [])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if r.returncode:
        return {f"{what}_error": (r.stderr.strip().splitlines() or ["?"])[-1][:400]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def with_diffs(row: dict) -> dict:
    """The estimate against the measurement, in percent of the measured figure, where the row has both."""
    m, e = row.get("measured_peak_bytes"), row.get("estimate_peak_bytes")
    if m and e:
        row["peak_diff_percent"] = round(100 * (e - m) / m, 4)
    if row.get("reserved_bytes") and row.get("estimate_reserved_bytes"):
        row["reserved_diff_percent"] = round(100 * (row["estimate_reserved_bytes"] / row["reserved_bytes"] - 1), 3)
    return row


ESTIMATE_KEYS = ("estimate_peak_bytes", "estimate_reserved_bytes", "estimate_paged_bytes", "estimate_host_peak_bytes")


def re_estimate(path: str) -> None:
    """The recording's measured half kept, its estimate half replayed again by today's engine (a CPU is enough): what
    the lesson shows beside a measurement is what the estimate says now, not on the day of the measurement."""
    rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]
    for row in rows:
        if "measured_peak_bytes" not in row:
            continue
        preset, levers = CASES[row["case"]]
        now = predict(config(preset, levers, False, "cuda"), "cuda")
        row.update({k: now[k] for k in (*ESTIMATE_KEYS, "trainable_parameters") if k in now})
        with_diffs(row)
        print(row["case"], row.get("peak_diff_percent"), row.get("reserved_diff_percent"), flush=True)
    Path(path).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def compare(cases: list[str], tiny: bool, device: str, jsonl: str | None = None) -> list[dict]:
    device_type = "cuda" if device == "cuda" else "cpu"
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        predicted = {c: pool.submit(_child, "predict", c, tiny, device_type) for c in cases}
        rows = []
        for case in cases:
            row = {"case": case, "levers": CASES[case][1], **_child("measure", case, tiny, device)}
            row.update(predicted[case].result())
            with_diffs(row)
            print(json.dumps(row), flush=True)
            if jsonl:  # row by row: a run cut short keeps what it measured
                with open(jsonl, "a", encoding="utf-8") as f:
                    f.write(json.dumps(row) + "\n")
            rows.append(row)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", action="append", choices=list(CASES))
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--tiny", action="store_true", help="the presets' CPU-sized variants")
    p.add_argument("--out", default=str(ROOT / "docs" / "benchmarks" / "finetune-methods-h200.json"))
    p.add_argument("--child", choices=("measure", "predict"))
    p.add_argument("--jsonl", help="also append each row to this file as it is measured")
    p.add_argument("--estimates", metavar="PATH", help="write the lesson's CPU replays there instead")
    p.add_argument(
        "--re-estimate", metavar="JSONL", help="replay a recording's estimates again (CPU), keep its measurements"
    )
    a = p.parse_args(argv)
    if a.re_estimate:
        re_estimate(a.re_estimate)
        return 0
    if a.estimates:
        Path(a.estimates).write_text(json.dumps(lesson_estimates(), indent=1) + "\n", encoding="utf-8")
        return 0
    if a.child:
        (case,) = a.only
        cfg = config(*CASES[case], a.tiny, a.device)
        print(json.dumps(measure(cfg) if a.child == "measure" else predict(cfg, a.device)))
        return 0
    t0 = time.perf_counter()
    rows = compare(a.only or list(CASES), a.tiny, a.device, a.jsonl)
    nan = float("nan")
    print(f"\n{'case':34} {'measured GiB':>13} {'estimate GiB':>13} {'diff %':>8} {'reserved diff %':>16}")
    for row in rows:
        m, e = row.get("measured_peak_bytes"), row.get("estimate_peak_bytes")
        print(
            f"{row['case']:34} {m / 2**30 if m else nan:13.4f} {e / 2**30 if e else nan:13.4f} "
            f"{row.get('peak_diff_percent', nan):8.3f} {row.get('reserved_diff_percent', nan):16.3f}"
        )
    Path(a.out).write_text(json.dumps({"rows": rows, "seconds": round(time.perf_counter() - t0, 1)}, indent=1) + "\n")
    print(f"wrote {a.out} in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
