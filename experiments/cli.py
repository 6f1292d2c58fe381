"""`python -m experiments run|distributed|estimate|fits|limits|models|guard|leak` — everything the app shows, as text
or JSON (--json). A model of one's own: `--model-preset llama3-8b`, `--model-type qwen2 --set layers=4`, `--import
pkg.mod:factory` (experiments/cli_models.py).

`guard` exits 1 when the gradients differ beyond the precision's tolerance, so that a script can tell."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from . import cli_checks, cli_models, cli_print
from .cli_models import add_fits_parser, add_model_flags, model_fields, print_estimate, print_fits, run_fits
from .cli_progress import Heartbeat, TerminalProgress
from .core import leak_scenarios
from .core.config import (
    BATCH_MODES,
    BUDGET_MB,
    CHOICES,
    RANGES,
    STRATEGIES,
    WORLD_SIZE,
    ConfigError,
    DistributedConfig,
    ExperimentConfig,
)
from .core.errors import CannotPredict, WouldNotFit
from .core.finetune import BNB_OPTIMIZERS
from .core.limits import LimitsError
from .core.limits import load as load_limits

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
    for name in FLAG_FIELDS:
        flag = "--" + name.replace("_", "-")
        # Parsed as strings so the config's own validation names the field in its message.
        if name in CHOICES:
            text = f"one of {', '.join(CHOICES[name])}"
        elif name in RANGES:
            text = f"an integer in [{RANGES[name][0]}, {RANGES[name][1]}]"
        else:
            text = (
                f"megabytes in [{BUDGET_MB[0]}, {BUDGET_MB[1]}], or none; default none" if name == "budget_mb" else ""
            )
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
    cli_checks.lonely_flags({**own, **data}, args)
    if data.get("optimizer") in BNB_OPTIMIZERS and data.get("optimizer_impl") is None:
        data["optimizer_impl"] = "default"  # a preset's own implementation is torch's; bitsandbytes' has one
    return ExperimentConfig.from_dict({**own, **data})  # a preset's levers, under the ones given


def _add_distributed_flags(p: argparse.ArgumentParser, alone: bool) -> None:
    """`alone`: the distributed subcommand (a data-parallel run by default); else `run`, which these flags turn into
    one."""
    lo, hi = WORLD_SIZE
    defaults = {f.name: f.default for f in dataclasses.fields(DistributedConfig) if f.name != "config"}
    when = "" if alone else "; with --world-size or --strategy, run data-parallel"
    p.add_argument(
        "--world-size",
        dest="world_size",
        default=None,
        metavar="N",
        help=f"an integer in [{lo}, {hi}]; default {defaults['world_size']}: processes, one per GPU (gloo on a CPU)"
        + when,
    )
    p.add_argument(
        "--strategy",
        dest="strategy",
        default=None,
        metavar="STRATEGY",
        help=f"one of {', '.join(STRATEGIES)}; default {defaults['strategy']}" + when,
    )
    p.add_argument(
        "--batch-mode",
        dest="batch_mode",
        default=None,
        metavar="MODE",
        help=f"one of {', '.join(BATCH_MODES)}; default {defaults['batch_mode']}: --batch is per rank or the global "
        "batch",
    )
    p.add_argument(
        "--no-update-check",
        dest="check_update",
        action="store_const",
        const=False,
        default=None,
        help="skip comparing the sharded update with the single-device one",
    )


def _sub(sub, name: str, text: str, **kwargs) -> argparse.ArgumentParser:
    """A subcommand whose own --help opens with what it does (`text`, unless a longer description is given)."""
    return sub.add_parser(name, help=text, description=kwargs.pop("description", text[:1].upper() + text[1:] + "."))


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m experiments", description="GPU Memory Lab experiment engine")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run_p = _sub(sub, "run", "run one configuration and measure it")
    _add_config_flags(run_p)
    add_model_flags(run_p)
    _add_distributed_flags(run_p, alone=False)
    dist_p = _sub(sub, "distributed", "run one configuration data-parallel (DDP, ZeRO, FSDP2) per rank")
    _add_config_flags(dist_p)
    _add_distributed_flags(dist_p, alone=True)
    est_p = _sub(
        sub,
        "estimate",
        "print the estimate only: the training step replayed on fake tensors (nothing is allocated)",
        description="The estimate the app shows before a run: setup and two training steps of the configuration, "
        'replayed on fake tensors (the result\'s "method" is "replay"), with each category\'s '
        'explanation ("terms").',
    )
    _add_config_flags(est_p)
    add_model_flags(est_p)
    fits_p = add_fits_parser(sub)
    _add_config_flags(fits_p)
    add_model_flags(fits_p)
    _sub(
        sub,
        "limits",
        "check the operator's limits file (GPU_MEMORY_LAB_LIMITS) and print the limits a class server would apply",
        description="Check the operator's limits file (GPU_MEMORY_LAB_LIMITS, or GPU_MEMORY_LAB_MAX_JOB_SECONDS) and "
        "print the limits a class server would apply; a broken file is one line naming the key, exit status 2. Run it "
        "before `streamlit run`, which reads the file only when it serves its first page.",
    )
    models_p = _sub(sub, "models", "the presets and the Hugging Face model types a model of your own can name")
    models_p.add_argument("--json", action="store_true", help="print one JSON object")
    guard_p = _sub(sub, "guard", "compare the configuration's gradients with the strict fp32 baseline (no TF32)")
    _add_config_flags(guard_p)
    leak_p = _sub(sub, "leak", "run a leak scenario and print allocated memory per step")
    leak_p.add_argument(
        "--scenario",
        required=True,
        choices=leak_scenarios.SCENARIOS,
        metavar="SCENARIO",
        help="one of: " + ", ".join(leak_scenarios.SCENARIOS),
    )
    for name, text in (("steps", "training steps"), ("batch", "samples per step"), ("width", "width of its MLP")):
        lo, hi, default = *leak_scenarios.LIMITS[name], leak_scenarios.DEFAULTS[name]
        leak_p.add_argument(f"--{name}", metavar=name.upper(), help=f"{text}, {lo}-{hi}; default {default}")
    leak_p.add_argument("--device", default="auto", help="one of auto, cuda, cpu; default auto")
    leak_p.add_argument("--json", action="store_true", help="print the whole result as JSON instead of a summary")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    own = False
    try:
        if args.command in ("run", "distributed", "guard", "leak"):
            load_limits()  # the operator's limits file, as the app reads it: a broken one is one line here too
        if args.command == "models":
            return cli_models.list_models(as_json=args.json) or 0
        if args.command == "limits":
            return cli_print.print_limits(load_limits())
        if args.command == "leak":
            params = cli_checks.leak_params(args)
            from .labs.leaks import run_leak

            result = run_leak(args.scenario, **params)
        else:
            cfg = _config(args)
            own = bool(cfg.model_source or args.spec)
            spread = (
                cli_checks.distributed_params(cfg.to_dict(), args) if args.command in ("run", "distributed") else None
            )
            if args.command == "fits":
                cli_checks.fits_args(args, cfg)
                result = run_fits(cfg, args)
            elif args.command == "estimate":
                from .estimate.estimator import estimate_or_refusal

                with Heartbeat(f"estimating {cfg.model_source or args.import_path or cfg.model}"):
                    result = estimate_or_refusal(cfg, device_type=_estimated_device(cfg), spec=args.spec)
            elif args.command == "guard":
                from .training.guard import check_gradients

                result = check_gradients(cfg)
            elif spread is not None:
                from .distributed.launch import run_distributed

                result = run_distributed(spread, progress=TerminalProgress())
            else:
                from .measure.run import run_experiment

                result = run_experiment(cfg, spec=args.spec, progress=TerminalProgress())
    except (ConfigError, WouldNotFit, LimitsError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except CannotPredict as e:
        print(str(e), file=sys.stderr)
        return 3
    except Exception as e:  # a model of one's own that raises (a forced run, a library's error): one line
        if not own:
            raise
        return cli_models.print_raised(e, args.command)
    return _output(args, result, own)


def _output(args, result: dict, own: bool) -> int:
    """Print the result (a person's summary, or with --json the whole of it) and return the exit status, the same in
    both: 3 where an estimate cannot be predicted, 1 where the gradients (or the data-parallel update) differ, 4 where
    a rank failed."""
    predicted = result.get("predicted", True)
    if args.json:
        json.dump(result, sys.stdout, default=str)
        print()
    elif args.command == "fits":
        (cli_print.print_methods if "methods" in result else print_fits)(result)
    elif args.command == "estimate":
        (print_estimate if own or not predicted else cli_print.print_family_estimate)(result)
    elif result.get("kind") == "distributed":
        cli_print.print_distributed(result)
    elif args.command in ("leak", "guard"):
        print(cli_print.leak_summary(result) if args.command == "leak" else cli_print.guard_summary(result))
    else:
        cli_print.print_run(result)
    if args.command == "estimate" and not predicted:
        return 3  # a script can tell "cannot be predicted" from an estimate
    if args.command == "guard" and not result.get("ok", True):
        return 1  # the gradients differ: a script (or CI) must be able to tell
    if result.get("kind") == "distributed":
        if result.get("errors"):
            return 4  # a rank failed, as a model's own error in a run is
        if not (result.get("update_check") or {}).get("ok", True):
            return 1  # the ranks' update differs from one device's, as guard's gradients
    return 0


def _estimated_device(cfg) -> str:
    """The device an estimate is for: "cuda" when asked, with or without a GPU here (the replay runs on fake tensors
    on the CPU either way); otherwise where a run would go."""
    if cfg.device == "cuda":
        return "cuda"
    from .measure.device import resolve_device

    return resolve_device(cfg.device).type
