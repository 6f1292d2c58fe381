"""The command line's models of one's own: `--model-preset`, `--model-type`, `--torchvision`, `--set NAME=VALUE`, and
(here only: it runs the learner's code) `--import package.module:factory --inputs ... --loss ...`; the `fits`
subcommand and `models` (what can be named)."""

from __future__ import annotations

import argparse
import sys

from .cli_checks import ACROSS, CAPACITY_GIB, MAX_BATCH
from .cli_progress import Heartbeat
from .core import library_names
from .core.config import ConfigError
from .core.model_sources import (
    HF_TASKS,
    IMPORT_PATH,
    LOSSES,
    OVERRIDES,
    format_overrides,
    parse_overrides,
    preset_defaults,
    presets,
)
from .core.units import GIB, fmt_bytes
from .core.vocabulary import RESERVED_WHY


def add_model_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("a model of your own (instead of --model)")
    g.add_argument("--model-preset", metavar="ID", help=f"one of {', '.join(presets())} (its default levers apply)")
    g.add_argument("--tiny", action="store_true", help="the preset's CPU-sized variant")
    g.add_argument("--model-type", metavar="TYPE", help="a Hugging Face model_type of the installed transformers")
    g.add_argument(
        "--head",
        help=f"with --model-type: the head it trains with, one of {', '.join(HF_TASKS)}; default: the first of these "
        "it has (models lists them)",
    )
    g.add_argument("--torchvision", metavar="NAME", help="a torchvision classification model (where it imports)")
    g.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE", help=f"a shape override: {', '.join(OVERRIDES)}"
    )
    g.add_argument("--import", dest="import_path", metavar="PKG.MOD:FACTORY", help="a factory returning an nn.Module")
    g.add_argument("--inputs", help="with --import: e.g. 'input_ids:int64[B,S]<128256' (B, S, I: levers)")
    g.add_argument("--targets", help="with --import: the loss's targets, e.g. 'labels:int64[B]<1000'; default none")
    g.add_argument("--loss", help="with --import: one of model (its own .loss), ce, mse, mean; default mean")


def model_fields(args) -> tuple[dict, object]:
    """(the configuration fields a model flag sets, preset defaults first; the import path's spec or None)."""
    chosen = [f for f in ("model_preset", "model_type", "torchvision", "import_path") if getattr(args, f, None)]
    if len(chosen) > 1:
        flags = ", ".join("--" + f.replace("_", "-").replace("-path", "") for f in chosen)
        raise ConfigError("model_source", f"choose one of {flags}", "choice", value=chosen[1], allowed=chosen[0])
    overrides = format_overrides(parse_overrides(",".join(args.set))) if getattr(args, "set", None) else ""
    if getattr(args, "tiny", False) and chosen[:1] != ["model_preset"]:
        raise ConfigError(
            "tiny", "--tiny is a preset's CPU-sized variant: give --model-preset", "one_of", fields="tiny,model_preset"
        )
    if chosen and getattr(args, "model", None) is not None:
        raise ConfigError(
            "model",
            f"--model picks a built-in family; --{chosen[0].replace('_', '-')} picks the model",
            "one_of",
            fields=f"model,{chosen[0]}",
        )
    head = getattr(args, "head", None)
    if head and chosen[:1] != ["model_type"]:
        raise ConfigError("head", "--head names the head of a --model-type", "one_of", fields="head,model_type")
    if head and head not in HF_TASKS:
        raise ConfigError(
            "head", f"got {head!r}; allowed: {', '.join(HF_TASKS)}", "choice", value=head, allowed=", ".join(HF_TASKS)
        )
    if not chosen:
        if overrides:
            raise ConfigError(
                "model_overrides",
                "--set needs a model",
                "unknown",
                value=overrides,
                known="--model-preset, --model-type",
            )
        return {}, None
    if chosen[0] == "import_path":
        _check_import(args.import_path, args.loss or "mean")
        from .training.source_models import import_spec

        if overrides:
            raise ConfigError(
                "model_overrides", "--set applies to presets and model types", "unknown", value=overrides, known=""
            )
        return {}, import_spec(args.import_path, args.inputs or "", args.targets or "", args.loss or "mean")
    if chosen[0] == "model_preset":
        if args.model_preset not in presets():  # a name, not a source (gpt2:tiny is --model-preset gpt2 --tiny)
            known = ", ".join(presets())
            raise ConfigError(
                "model_preset",
                f"unknown preset {args.model_preset!r}; allowed: {known}",
                "unknown",
                value=args.model_preset,
                known=known,
            )
        source = f"preset:{args.model_preset}" + (":tiny" if args.tiny else "")
        return {**preset_defaults(source), "model_source": source, "model_overrides": overrides}, None
    kind = "hf" if chosen[0] == "model_type" else "torchvision"
    if kind == "hf":  # the libraries' own checks import torch: a typo or a missing package answers before that
        library_names.check_model_type(args.model_type)
    else:
        library_names.check_torchvision()
    source = f"{kind}:{getattr(args, chosen[0])}" + (f":{head}" if head else "")
    return {"model_source": source, "model_overrides": overrides}, None


def _check_import(path: str, loss: str) -> None:
    """The import path's form and the loss, before torch (training/source_models.py checks them again)."""
    if not IMPORT_PATH.fullmatch(path):
        raise ConfigError("import", f"{path!r} is not package.module:factory", "model_spec", detail=path)
    if loss not in LOSSES:
        raise ConfigError(
            "loss", f"got {loss!r}; allowed: {', '.join(LOSSES)}", "choice", value=loss, allowed=", ".join(LOSSES)
        )


def add_fits_parser(sub) -> argparse.ArgumentParser:
    text = (
        "what fits a memory size: the largest batch per precision x optimizer implementation x checkpointing, "
        "the cheapest combination for --batch, and with --across the fewest GPUs and the strategy"
    )
    p = sub.add_parser("fits", help=text, description=text[:1].upper() + text[1:] + ".")
    lo, hi = CAPACITY_GIB
    p.add_argument(
        "--capacity-gib",
        metavar="GIB",
        help=f"a number in [{lo}, {hi}]: the card's memory in GiB, as the driver reports its total; default: this "
        "GPU's (H200: about 139.8)",
    )
    p.add_argument(
        "--card", default="", help="a card by name instead (experiments/core/cards.json), e.g. rtx-4090-24gb"
    )
    p.add_argument("--precisions", default="", help="comma-separated precisions to try (default: --precision)")
    lo, hi = MAX_BATCH
    p.add_argument(
        "--max-batch", metavar="N", help=f"an integer in [{lo}, {hi}]; default {hi}: the largest batch searched"
    )
    p.add_argument(
        "--device-type",
        choices=("cuda", "cpu"),
        default="cuda",
        help="one of cuda, cpu; default cuda: which device to predict",
    )
    lo, hi = ACROSS
    p.add_argument(
        "--across", metavar="N", help=f"an integer in [{lo}, {hi}]; default none: also the fewest of up to N GPUs"
    )
    p.add_argument(
        "--methods",
        action="store_true",
        help="instead: which fine-tuning method (full, lora, qlora, int8; with and without checkpointing) runs on the "
        "card at --batch and --seq-len, and the first that does, least compromise first",
    )
    p.add_argument(
        "--largest",
        action="store_true",
        help="with --methods: also the largest batch each method runs at on the card (a search per method: minutes "
        "for a 7B model on a CPU)",
    )
    p.add_argument(
        "--measure",
        action="store_true",
        help="then confirm the largest batch at your levers by real trials on this GPU (two steps a trial, each in "
        "its own process, the card emulated where it is smaller)",
    )
    return p


def run_fits(cfg, args) -> dict:
    from . import cli_measure
    from .core import cards

    cli_measure.check(args)

    capacity, overhead = args.capacity_gib, None
    if args.card:
        if capacity is not None:
            raise ConfigError("card", "give --card or --capacity-gib, not both", "one_of", fields="card,capacity_gib")
        try:
            chosen = cards.card(args.card)
        except KeyError as e:
            known = ",".join(c["id"] for c in cards.CARDS)
            raise ConfigError(
                "card", str(e.args[0]).removeprefix("card: "), "choice", value=args.card, allowed=known
            ) from None
        capacity, overhead = chosen["total_bytes"] / GIB, cards.overhead_bytes(chosen)
    if capacity is None:
        import torch

        if not torch.cuda.is_available():
            raise ConfigError("capacity_gib", "no GPU here: give --capacity-gib or --card", "needs_cuda")
        if args.measure:  # read without a context in this process (experiments/measure/boundary.py)
            from .measure.boundary import gpu_total_bytes

            capacity = gpu_total_bytes() / GIB
        else:
            capacity = torch.cuda.mem_get_info()[1] / GIB
    lo, hi = CAPACITY_GIB
    if not lo <= capacity <= hi:  # a GPU's own, or a card's
        raise ConfigError(
            "capacity_gib", f"got {capacity}; allowed range is [{lo}, {hi}]", "range", value=capacity, lo=lo, hi=hi
        )
    if args.methods:
        if args.precisions or args.across:
            raise ConfigError(
                "methods", "--methods compares methods at your levers", "one_of", fields="methods,precisions"
            )
        from .distributed.method_fits import methods_on_card

        overhead = cards.overhead_bytes() if overhead is None else overhead
        out = methods_on_card(cfg, int(capacity * GIB), overhead, progress=_progress(args), largest=args.largest)
        return out | ({"card": args.card} if args.card else {})
    precisions = tuple(p for p in args.precisions.split(",") if p) or None
    for p in precisions or ():
        cfg.replace(precision=p)  # each one validated: one line naming the field
    from .distributed.model_fits import fits_across, what_fits  # torch: after every argument is checked

    out = what_fits(
        cfg,
        int(capacity * GIB),
        args.device_type,
        precisions,
        max_batch=args.max_batch,
        overhead_bytes=overhead,
        progress=_progress(args),
    )
    if args.card:
        out["card"] = args.card
    if args.across:
        with Heartbeat(f"searching across {args.across} GPUs"):
            out["across_gpus"] = fits_across(cfg, int(capacity * GIB), args.across, args.device_type)
    if args.measure:
        out["measured"] = cli_measure.measure(out, cfg, args)
    elif args.device_type == "cuda":
        import torch

        out["gpu_here"] = torch.cuda.is_available()
    return out


def _progress(args):
    import sys

    if getattr(args, "json", False):
        return None

    def show(done: int, planned: int) -> None:
        print(f"  {done} of {planned} lever combinations searched", file=sys.stderr, flush=True)

    return show


def print_fits(r: dict) -> None:
    card = f"{r['card']}: " if r.get("card") else ""
    print(
        f"{card}{r['capacity_bytes'] / GIB:.2f} GiB ({r['device_type']}), {r.get('overhead_bytes', 0) / GIB:.2f} GiB of "
        f"it held outside PyTorch's allocator (CUDA context, libraries); batch {r['batch']}"
    )
    at = f"at batch {r['batch']}"
    print(
        f"{'precision':10} {'impl':9} {'checkpoint':10} {'largest batch':>13} {'expandable':>10} {'peak GiB':>9} "
        f"{at:>14} {'against yours':>16}"
    )
    for row in r["grid"]:
        peak = "-" if row["peak_bytes"] is None else f"{row['peak_bytes'] / GIB:9.3f}"
        saved = row.get("saves_bytes") or 0
        against = (
            "-" if not saved else f"{'-' if saved > 0 else '+'}{fmt_bytes(abs(saved))} ({abs(row['saves_percent'])} %)"
        )
        print(
            f"{row['precision']:10} {row['optimizer_impl']:9} {row['checkpoint']:10} "
            f"{row['largest_batch']:>13} {row.get('largest_batch_expandable', row['largest_batch']):>10} {peak:>9} "
            f"{fmt_bytes(row['peak_at_batch_bytes']):>14} {against:>16}"
        )
    if r["device_type"] == "cuda":
        print(
            "largest batch: with PyTorch's default allocator; expandable: with "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
        )
    if r.get("unmeasured_ops"):
        print(
            f"not counted: the scratch of {', '.join(r['unmeasured_ops'])} (kernel scratch such as cuDNN's workspaces, "
            "measured only on a GPU and per shape): the largest batch may be above what runs"
        )
    c = r["cheapest"]
    print(
        "cheapest: none fits"
        if c is None
        else f"cheapest for batch {r['batch']}: {c['precision']}, {c['optimizer_impl']}, checkpoint {c['checkpoint']}, "
        f"accum {c['accum']} (micro-batch {c['micro_batch']}): {c['peak_bytes'] / GIB:.3f} GiB"
    )
    if "across_gpus" in r:
        a = r["across_gpus"]
        print("across GPUs: none fits" if a is None else f"across GPUs: {a['world_size']} x {a['strategy']}")
    print(f"{r['replays']} replays, {r['seconds']} s")
    if "measured" in r:
        from .cli_measure import print_measured

        print_measured(r["measured"])
    elif r.get("gpu_here"):
        print("a GPU is here: --measure confirms the largest batch at your levers by real trials on it")


def print_estimate(r: dict) -> None:
    if not r["predicted"]:
        print(r["cannot_predict"]["message"])
        return
    trains = "" if r["trainable_parameters"] == r["parameters"] else f" ({r['trainable_parameters']:,} trainable)"
    print(
        f"{r['config']['model_source'] or 'import'}: {r['parameters']:,} parameters{trains}, {r['device_type']} "
        f"estimate ({r['path']}, {r['seconds']} s)"
    )
    for p in r["phases"]:
        micro = "" if p["micro"] is None else f".{p['micro']}"
        print(
            f"  step {p['step']}{micro:3} {p['phase']:15} allocated {fmt_bytes(p['allocated_bytes']):>11}  "
            f"peak {fmt_bytes(p['peak_bytes']):>11}"
        )
    rule = (
        f"the 16-bytes rule says {fmt_bytes(r['formula_bytes'])}"
        if r["trainable_parameters"] == r["parameters"]
        else "the 16-bytes rule is for full training"
    )
    print(
        f"peak {fmt_bytes(r['peak_bytes'])} in {r['peak_phase']} (step {r['peak_step']}); "
        f"{r['bytes_per_parameter']:.2f} bytes per parameter; {rule}"
    )
    if r.get("paged_bytes"):
        print(f"paged optimizer state in CUDA managed memory (in neither figure): {fmt_bytes(r['paged_bytes'])}")
    if r.get("host_peak_bytes"):
        print(f"host memory at its peak, beside the device's (never added to it): {fmt_bytes(r['host_peak_bytes'])}")
    if r["reserved_bytes"] is not None:
        print(f"reserved (the caching allocator's segments) {fmt_bytes(r['reserved_bytes'])}")
    else:
        print(f"reserved: not given; {RESERVED_WHY[r['reserved_why']]}")


def list_models(as_json: bool = False) -> None:
    from .training.hf_models import model_types

    types = model_types()
    if as_json:
        import json
        import sys

        titles = {pid: p["title"] for pid, p in presets().items()}
        json.dump({"presets": titles, "model_types": {k: list(v) for k, v in types.items()}}, sys.stdout)
        print()
        return
    for pid, p in presets().items():
        print(f"preset  {pid:14} {p['title']['en']}  /  {p['title']['zh']}")
    for model_type, tasks in types.items():
        print(f"hf      {model_type:32} {', '.join(tasks)}")


def print_raised(e: BaseException, command: str) -> int:
    """A model of one's own that raised what no check foresaw (a real run forced past "cannot be predicted", a
    library's own error): one line naming the exception and the innermost place in the library or the model that
    raised it, exit status 4, never a traceback."""
    import traceback

    frames = traceback.extract_tb(e.__traceback__)
    outside = [f for f in frames if "/experiments/" not in f.filename.replace("\\", "/")] or frames
    where = f" ({outside[-1].filename}:{outside[-1].lineno})" if outside else ""
    first = (str(e).strip().splitlines() or [""])[0][:300]
    what = "the real run" if command == "run" else f"the {command}"
    print(f"error: {what} of this model raised {type(e).__name__}: {first}{where}", file=sys.stderr)
    return 4
