"""The command line's checks that come before torch is imported (its import alone takes seconds): flags that mean
nothing without another one, the numbers of `leak` and `fits`, and a data-parallel run's spread. Each refusal is a
ConfigError: one line naming the field and what it allows, exit status 2. Torch-free."""

from __future__ import annotations

import math

from .core import leak_scenarios
from .core.config import CHOICES, RANGES, WORLD_SIZE, ConfigError, DistributedConfig, not_integer

# fits' own numbers: the card's memory in GiB, the largest batch searched, the most GPUs tried.
CAPACITY_GIB = (0.001, 100_000)
MAX_BATCH = RANGES["batch"]
ACROSS = WORLD_SIZE
# Flags that set a lever of another flag's choice, and that choice: given alone they would be dropped in silence.
_ADAPTERS = ("lora", "qlora", "int8")
NEEDS = {
    "segments": ("checkpoint", ("segments",), "the segments of --checkpoint segments"),
    **{
        name: ("finetune", _ADAPTERS, "the adapters of --finetune lora, qlora or int8")
        for name in ("lora_rank", "lora_alpha", "lora_targets", "adapter_dtype")
    },
    "quant_type": ("finetune", ("qlora",), "the 4-bit base of --finetune qlora"),
    "double_quant": ("finetune", ("qlora",), "the 4-bit base of --finetune qlora"),
}


def integer(name: str, raw, lo: int, hi: int) -> int:
    """An integer flag's value, or one line naming the flag and its range."""
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ConfigError(name, not_integer(raw, lo, hi), "range", value=raw, lo=lo, hi=hi) from None
    if not lo <= value <= hi:
        raise ConfigError(name, f"got {value}; allowed range is [{lo}, {hi}]", "range", value=value, lo=lo, hi=hi)
    return value


def number(name: str, raw, lo: float, hi: float) -> float:
    """A real flag's value (finite), or one line naming the flag and its range."""
    try:
        value = float(str(raw).strip())
    except ValueError:
        value = math.nan
    if not lo <= value <= hi:  # nan and inf too
        raise ConfigError(name, f"got {raw!r}; allowed range is [{lo}, {hi}]", "range", value=raw, lo=lo, hi=hi)
    return value


def lonely_flags(data: dict, args) -> None:
    """Refuse a lever given without the choice it belongs to (`data`: the flags given, a preset's levers beneath)."""
    for name, (owner, wanted, what) in NEEDS.items():
        if getattr(args, name, None) is not None and data.get(owner) not in wanted:
            flag = "--no-double-quant" if name == "double_quant" else "--" + name.replace("_", "-")
            raise ConfigError(name, f"{flag} sets {what}", "one_of", fields=f"{name},{owner}")
    if getattr(args, "import_path", None) is None:
        for name in ("inputs", "targets", "loss"):
            if getattr(args, name, None) is not None:
                raise ConfigError(name, f"--{name} describes the model of --import", "one_of", fields=f"{name},import")
    spread = [k for k in ("world_size", "strategy") if getattr(args, k, None) is not None]
    if getattr(args, "command", "") == "run" and not spread:
        for name in ("batch_mode", "check_update"):
            if getattr(args, name, None) is not None:
                flag = "--batch-mode" if name == "batch_mode" else "--no-update-check"
                raise ConfigError(
                    name, f"{flag} is for a data-parallel run: add --world-size or --strategy", "one_of", fields=name
                )


def leak_params(args) -> dict:
    """`leak`'s sizes and device, checked by the leak lab's own limits."""
    out = {}
    for name in ("steps", "batch", "width"):
        raw = getattr(args, name)
        out[name] = leak_scenarios.DEFAULTS[name] if raw is None else integer(name, raw, *leak_scenarios.LIMITS[name])
    devices = CHOICES["device"]
    if args.device not in devices:
        allowed = ", ".join(devices)
        raise ConfigError(
            "device", f"got {args.device!r}; allowed: {allowed}", "choice", value=args.device, allowed=allowed
        )
    return out | {"device": args.device}


def fits_args(args, cfg) -> None:
    """`fits`' own flags, in place: numbers within their ranges, and --methods only where it can compare."""
    if args.capacity_gib is not None:
        args.capacity_gib = number("capacity_gib", args.capacity_gib, *CAPACITY_GIB)
    args.max_batch = MAX_BATCH[1] if args.max_batch is None else integer("max_batch", args.max_batch, *MAX_BATCH)
    args.across = 0 if args.across is None else integer("across", args.across, *ACROSS)
    if args.largest and not args.methods:
        raise ConfigError(
            "largest", "--largest searches each method of --methods; add --methods", "one_of", fields="largest,methods"
        )
    if args.methods and not cfg.model_source.startswith(("preset:", "hf:")):
        raise ConfigError(
            "methods",
            "--methods compares fine-tuning methods, which apply to a --model-preset or --model-type",
            "one_of",
            fields="methods,model_source",
        )


def distributed_params(config: dict, args) -> dict | None:
    """A data-parallel run's parameters, checked as the run will check them, or None for a one-device run."""
    extra = {k: getattr(args, k, None) for k in ("world_size", "strategy", "batch_mode", "check_update")}
    if args.command != "distributed" and extra["world_size"] is None and extra["strategy"] is None:
        return None
    params = {**config, **{k: v for k, v in extra.items() if v is not None}}
    DistributedConfig.from_dict(params)
    return params
