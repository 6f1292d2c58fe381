"""`python -m experiments run|distributed|estimate|fits|models|guard|leak` — everything the app shows, as text or JSON
(--json). A model of one's own: `--model-preset llama3-8b`, `--model-type qwen2 --set layers=4`, `--import
pkg.mod:factory` (experiments/cli_models.py).

`guard` exits 1 when the gradients differ beyond the precision's tolerance, so that a script can tell."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from . import cli_models
from .cli_models import add_fits_parser, add_model_flags, model_fields, print_estimate, print_fits, run_fits
from .cli_progress import TerminalProgress
from .core import leak_scenarios
from .core.config import BATCH_MODES, CHOICES, RANGES, STRATEGIES, ConfigError, ExperimentConfig
from .core.errors import CannotPredict, WouldNotFit
from .core.finetune import BNB_OPTIMIZERS
from .core.units import MIB, fmt_bytes

# The configuration's own defaults, for --help (a dataclass's fields, read without building one).
DEFAULTS = {f.name: f.default for f in dataclasses.fields(ExperimentConfig)}
FLAG_FIELDS = {
    "device": str,
    "model": str,
    "layers": int,
    "width": int,
    "batch": int,
    "seq_len": int,
    "heads": int,
    "image_size": int,
    "precision": str,
    "checkpoint": str,
    "segments": int,
    "accum": int,
    "optimizer": str,
    "optimizer_impl": str,
    "steps": int,
    "timing_steps": int,
    "budget_mb": float,
    "seed": int,
    # Fine-tuning (experiments/core/finetune.py): peft's LoRA on a model of one's own, every n-th layer checkpointed.
    "finetune": str,
    "lora_rank": int,
    "lora_alpha": int,
    "lora_targets": str,
    "adapter_dtype": str,
    "checkpoint_every": int,
    "quant_type": str,
}
# Said under a flag beside its values (argparse shows it in --help).
FLAG_HELP = {
    "precision": "fp32: PyTorch's defaults (matmuls in full fp32, cuDNN convolutions in TF32); fp32_strict: no TF32 "
    "(torch.backends.cudnn.allow_tf32 = False); tf32: TF32 for matmuls too; amp_fp16, amp_bf16: autocast; "
    "bf16: weights too",
    "optimizer": "adamw8bit, paged_adamw, paged_adamw8bit: bitsandbytes' (8-bit state; paged state in CUDA managed "
    "memory, which a CPU run does not have)",
    "finetune": "lora: peft's get_peft_model on a --model-preset or --model-type (frozen base weights); qlora: the "
    "same on a 4-bit base (bitsandbytes' Linear4bit, peft's prepare_model_for_kbit_training); int8: on an 8-bit base "
    "(LLM.int8, Linear8bitLt)",
    "quant_type": "qlora's 4-bit data type (bnb_4bit_quant_type)",
    "lora_targets": "attention: the attention blocks' linear projections; all_linear: every linear layer but the head",
    "adapter_dtype": "fp32: peft's default (autocast_adapter_dtype) on a bf16/fp16 model; model: the model's dtype",
    "checkpoint_every": "with --checkpoint per_layer: checkpoint every n-th layer only",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit status 2, like every other bad input
        self.exit(2, f"error: {message}\n")


def _add_config_flags(p: argparse.ArgumentParser) -> None:
    for name, typ in FLAG_FIELDS.items():
        flag = "--" + name.replace("_", "-")
        # Parsed as strings so the config's own validation names the field in its message.
        if name in CHOICES:
            text = f"one of {', '.join(CHOICES[name])}"
        elif name in RANGES:
            text = f"an integer in [{RANGES[name][0]}, {RANGES[name][1]}]"
        else:
            text = "megabytes, or none" if name == "budget_mb" else typ.__name__
        default = DEFAULTS.get(name)
        text += "" if default is None else f"; default {default}"
        p.add_argument(
            flag,
            dest=name,
            default=None,
            metavar=name.upper(),
            help=f"{text}. {FLAG_HELP[name]}" if name in FLAG_HELP else text,
        )
    p.add_argument(
        "--zero-grad-keep",
        dest="zero_grad_to_none",
        action="store_const",
        const=False,
        default=None,
        help="zero_grad(set_to_none=False): keep gradient tensors between steps",
    )
    p.add_argument("--inplace", dest="inplace", action="store_const", const=True, default=None, help="in-place ReLU")
    p.add_argument(
        "--no-double-quant",
        dest="double_quant",
        action="store_const",
        const=False,
        default=None,
        help="qlora: keep the 4-bit blocks' scales in fp32 (bnb_4bit_use_double_quant=False)",
    )
    p.add_argument(
        "--offload-activations",
        dest="offload_activations",
        action="store_const",
        const=True,
        default=None,
        help="every tensor autograd saves goes to pinned host memory in the forward and back in backward "
        "(torch.autograd.graph.save_on_cpu); a GPU run or a CUDA estimate",
    )
    p.add_argument(
        "--force",
        dest="force",
        action="store_const",
        const=True,
        default=None,
        help="run even if the estimate says it will not fit",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _config(args) -> ExperimentConfig:
    data = {
        k: getattr(args, k)
        for k in list(FLAG_FIELDS) + ["zero_grad_to_none", "inplace", "force", "offload_activations", "double_quant"]
        if getattr(args, k) is not None
    }
    own, args.spec = model_fields(args) if hasattr(args, "set") else ({}, None)
    if data.get("segments") is not None and data.get("checkpoint", "none") != "segments":
        raise ConfigError(
            "segments", "--segments sets the segments of --checkpoint segments", "one_of", fields="segments,checkpoint"
        )
    lora = [k for k in ("lora_rank", "lora_alpha", "lora_targets", "adapter_dtype") if data.get(k) is not None]
    if lora and data.get("finetune") in (None, "full"):
        flag = "--" + lora[0].replace("_", "-")
        raise ConfigError(
            lora[0],
            f"{flag} sets the adapters of --finetune lora, qlora or int8",
            "one_of",
            fields=f"{lora[0]},finetune",
        )
    if data.get("optimizer") in BNB_OPTIMIZERS and data.get("optimizer_impl") is None:
        data["optimizer_impl"] = "default"  # a preset's own implementation is torch's; bitsandbytes' has one
    return ExperimentConfig.from_dict({**own, **data})  # a preset's levers, under the ones given


def _mb(n) -> str:
    return "-" if n is None else f"{n / MIB:10.2f}"


def _print_run(r: dict) -> None:
    d = r["device"]
    print(f"device: {d['type']} {d.get('name')}  torch {d['torch_version']}")
    print(f"{'step':>4} {'micro':>5} {'phase':<15} {'alloc MiB':>10} {'reserved':>10} {'peak MiB':>10} {'ms':>9}")
    for p in r["phases"]:
        micro = "" if p["micro"] is None else p["micro"]
        print(
            f"{p['step']:>4} {micro:>5} {p['phase']:<15} {_mb(p['allocated_bytes'])} {_mb(p['reserved_bytes'])} "
            f"{_mb(p['peak_bytes'])} {p['ms']:9.2f}"
        )
    if r["oom"]:
        print(f"OUT OF MEMORY in {r['oom']['phase']} (step {r['oom']['step']}): {r['oom']['message']}")
    if r["peak_bytes"] is not None:
        net = r["peak_bytes"] - r["baseline_bytes"]
        est = r["estimate"]["peak_bytes"]
        said = "no estimate (cannot be predicted)" if est is None else f"estimate {_mb(est).strip()} MiB"
        print(
            f"peak: {_mb(r['peak_bytes']).strip()} MiB in {r['peak_phase']['phase']} (step {r['peak_phase']['step']}); "
            f"above baseline {_mb(net).strip()} MiB; {said}"
        )
    if r["step_ms"]:
        s = r["step_ms"]
        print(
            f"step time: median {s['median']:.3f} ms (p10 {s['p10']:.3f}, p90 {s['p90']:.3f}); "
            f"{r['samples_per_s']:.1f} samples/s; {r['tflops']:.2f} TFLOP/s"
        )
    if r["breakdown"]:
        print("at peak: " + ", ".join(f"{k} {_mb(v).strip()} MiB" for k, v in r["breakdown"].items() if v))


def _add_distributed_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--world-size",
        dest="world_size",
        default=None,
        metavar="N",
        help="run data-parallel on N processes (one per GPU; gloo on CPU)",
    )
    p.add_argument(
        "--strategy", dest="strategy", default=None, metavar="STRATEGY", help=f"one of {', '.join(STRATEGIES)}"
    )
    p.add_argument(
        "--batch-mode",
        dest="batch_mode",
        default=None,
        metavar="MODE",
        help=f"one of {', '.join(BATCH_MODES)}: --batch is per rank (default) or the global batch",
    )
    p.add_argument(
        "--no-update-check",
        dest="check_update",
        action="store_const",
        const=False,
        default=None,
        help="skip comparing the sharded update with the single-device one",
    )


def _distributed_params(args) -> dict | None:
    extra = {k: getattr(args, k, None) for k in ("world_size", "strategy", "batch_mode", "check_update")}
    if args.command != "distributed" and extra["world_size"] is None and extra["strategy"] is None:
        return None
    return {**_config(args).to_dict(), **{k: v for k, v in extra.items() if v is not None}}


def _print_distributed(r: dict) -> None:
    d = r["device"]
    print(f"device: {d['type']} {d.get('name')}  torch {d['torch_version']}  backend {r['backend']}")
    print(
        f"strategy {r['strategy']}, world size {r['world_size']}, batch {r['per_rank_batch']} per rank "
        f"({r['global_batch']} global)"
    )
    for rank in r["ranks"]:
        print(f"-- rank {rank['rank']}")
        _print_run({**r, **rank, "estimate": r["estimate"], "step_ms": None})
        s = rank.get("step_ms")
        if s:
            print(f"step time with communication: median {s['median']:.3f} ms (p10 {s['p10']:.3f}, p90 {s['p90']:.3f})")
    for e in r["errors"]:
        print(f"ERROR {e}")
    u = r.get("update_check")
    if u:
        print(
            f"update vs single device: {'OK' if u['ok'] else 'DIFFERS'} (max abs diff {u['max_abs_diff']:.3g}, "
            f"largest update {u['max_update']:.3g})"
        )


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="python -m experiments", description="GPU Memory Lab experiment engine")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run_p = sub.add_parser("run", help="run one configuration and measure it")
    _add_config_flags(run_p)
    add_model_flags(run_p)
    _add_distributed_flags(run_p)
    dist_p = sub.add_parser("distributed", help="run one configuration data-parallel (DDP, ZeRO, FSDP2) per rank")
    _add_config_flags(dist_p)
    _add_distributed_flags(dist_p)
    est_p = sub.add_parser(
        "estimate",
        help="print the estimate only: the training step replayed on fake tensors (nothing is allocated)",
        description="The estimate the app shows before a run: setup and two training steps of the configuration, "
        'replayed on fake tensors (the result\'s "method" is "replay"), with each category\'s '
        'explanation ("terms").',
    )
    _add_config_flags(est_p)
    add_model_flags(est_p)
    fits_p = add_fits_parser(sub)
    _add_config_flags(fits_p)
    add_model_flags(fits_p)
    sub.add_parser("models", help="the presets and the Hugging Face model types a model of your own can name")
    guard_p = sub.add_parser(
        "guard", help="compare the configuration's gradients with the strict fp32 baseline (no TF32)"
    )
    _add_config_flags(guard_p)
    leak_p = sub.add_parser("leak", help="run a leak scenario and print allocated memory per step")
    leak_p.add_argument(
        "--scenario",
        required=True,
        choices=leak_scenarios.SCENARIOS,
        metavar="SCENARIO",
        help="one of: " + ", ".join(leak_scenarios.SCENARIOS),
    )
    for name, text in (("steps", "training steps"), ("batch", "samples per step"), ("width", "width of its MLP")):
        lo, hi, default = *leak_scenarios.LIMITS[name], leak_scenarios.DEFAULTS[name]
        leak_p.add_argument(f"--{name}", type=int, default=default, help=f"{text}, {lo}-{hi}; default {default}")
    leak_p.add_argument("--device", default="auto", help="one of auto, cuda, cpu; default auto")
    leak_p.add_argument("--json", action="store_true", help="print the whole result as JSON instead of a summary")
    args = parser.parse_args(argv)

    own = False
    try:
        if args.command == "models":
            from .cli_models import list_models

            list_models()
            return 0
        if args.command == "leak":
            from .labs.leaks import run_leak

            result = run_leak(args.scenario, steps=args.steps, device=args.device, batch=args.batch, width=args.width)
        else:
            cfg = _config(args)
            own = bool(cfg.model_source or args.spec)
            if args.command == "fits":
                result = run_fits(cfg, args)
            elif args.command == "estimate" and own:
                from .estimate.estimator import estimate_or_refusal

                result = estimate_or_refusal(cfg, device_type=_estimated_device(cfg), spec=args.spec)
            elif args.command == "estimate":
                from .estimate.estimator import estimate

                result = estimate(cfg, device_type=_estimated_device(cfg))
            elif args.command == "guard":
                from .training.guard import check_gradients

                result = check_gradients(cfg)
            elif _distributed_params(args) is not None:
                from .distributed.launch import run_distributed

                result = run_distributed(_distributed_params(args), progress=TerminalProgress())
            else:
                from .measure.run import run_experiment

                result = run_experiment(cfg, spec=args.spec, progress=TerminalProgress())
    except (ConfigError, WouldNotFit) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except CannotPredict as e:
        print(str(e), file=sys.stderr)
        return 3
    except Exception as e:  # a model of one's own that raises (a forced run, a library's error): one line
        if not own:
            raise
        return cli_models.print_raised(e, args.command)
    if args.command == "fits" and "methods" in result and not args.json:
        return cli_models.print_methods(result) or 0
    if args.command in ("fits", "estimate") and own and not args.json:
        (print_fits if args.command == "fits" else print_estimate)(result)
        return 0 if result.get("predicted", True) else 3
    if args.command == "estimate" and own and not result.get("predicted", True):
        json.dump(result, sys.stdout, default=str)
        print()
        return 3  # as in text mode: a script can tell "cannot be predicted" from an estimate
    if result.get("kind") == "distributed" and not args.json:
        _print_distributed(result)
        return 0
    if args.command == "estimate" and not args.json:
        _print_estimate(result)
    elif args.command in ("leak", "guard") and not args.json:
        print(_leak_summary(result) if args.command == "leak" else _guard_summary(result))
    elif args.json or args.command != "run":
        json.dump(result, sys.stdout, indent=None if args.json else 2, default=str)
        print()
    else:
        _print_run(result)
    if args.command == "guard" and not result.get("ok", True):
        return 1  # the gradients differ: a script (or CI) must be able to tell
    return 0


def _leak_summary(r: dict) -> str:
    """One line a person reads: how much the loop keeps per step (--json prints every step and the census)."""
    growth = r.get("growth_bytes_per_step") or 0
    where = f"{r['scenario']} on {r['device']['type'] if isinstance(r.get('device'), dict) else r.get('device')}"
    steps = sum(1 for row in r.get("per_step") or [] if row.get("step"))  # step 0: before the loop
    verdict = f"grows {fmt_bytes(int(growth))} per step" if growth > 0 else "does not grow"
    tail = f"; gc.collect() freed {fmt_bytes(int(r['gc_freed_bytes']))}" if r.get("gc_freed_bytes") else ""
    return f"{where}: {verdict} over {steps} steps (batch {r['batch']}, width {r['width']}){tail}"


def _guard_summary(r: dict) -> str:
    """One line: do the gradients match the fp32 baseline within the precision's tolerance."""
    return (
        f"gradients {'match' if r['ok'] else 'DIFFER from'} the {r['baseline_precision']} baseline: largest difference {r['max_abs_diff']:.3g} "
        f"(relative {r['max_rel_diff']:.3g}), tolerance {r['tolerance']:.3g} ({r['precision']}, checkpoint "
        f"{r['checkpoint']}, accumulation {r['accum']})"
    )


def _estimated_device(cfg) -> str:
    """The device an estimate is for: "cuda" when asked, with or without a GPU here (the replay runs on fake tensors
    on the CPU either way); otherwise where a run would go."""
    if cfg.device == "cuda":
        return "cuda"
    from .measure.device import resolve_device

    return resolve_device(cfg.device).type


def _print_estimate(e: dict) -> None:
    """A person's summary of the estimate; --json prints all of it (its terms, phases and method)."""
    phase = f" (in {e['peak_phase']})" if e.get("peak_phase") else ""
    print(f"estimated peak: {e['peak_bytes'] / MIB:,.1f} MiB{phase}  [{e.get('method')} on {e.get('device_type')}]")
    for category, size in (e.get("categories") or {}).items():
        if size:
            print(f"  {category:<16} {size / MIB:>10,.1f} MiB")
    if e.get("fits") is not None:
        print(f"fits the budget of {e['capacity_bytes'] / MIB:,.1f} MiB: {'yes' if e['fits'] else 'no'}")
    print("(--json for the whole estimate: each category's terms, the steady state, the method)")
