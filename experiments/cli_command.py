"""The command line that repeats a page's configuration, so that a learner or a teacher can run the same experiment in
a terminal: `fits ... --measure` on a machine with a GPU confirms "What fits" by real trials. Torch-free; parsing the
command gives the configuration back (tests/engine/test_cli_command.py)."""

from __future__ import annotations

import shlex

from .cli import DEFAULTS, FLAG_FIELDS
from .core.model_sources import parse_source, preset_defaults

# Fields a command repeating an experiment leaves to the machine it runs on, or that do not change a fits answer.
LEFT_OUT = {"device", "steps", "timing_steps", "force"}
SWITCHES = {  # field: (the value the switch sets, its flag)
    "zero_grad_to_none": (False, "--zero-grad-keep"),
    "inplace": (True, "--inplace"),
    "double_quant": (False, "--no-double-quant"),
    "offload_activations": (True, "--offload-activations"),
}


def model_flags(source: str) -> list[str] | None:
    """The flags that pick a model source; None for one the command line takes another way (an import path)."""
    if not source:
        return []
    if source.startswith("import:"):
        return None
    kind, name, variant = parse_source(source)
    if kind == "preset":
        return ["--model-preset", name] + (["--tiny"] if variant == "tiny" else [])
    if kind == "hf":
        return ["--model-type", name] + (["--head", variant] if variant else [])
    return ["--torchvision", name]


def config_flags(config: dict) -> list[str] | None:
    """The flags that give `config` (an ExperimentConfig's dict) on the command line: the model, then every lever that
    differs from what the model opens with. None where the model cannot be named on a command line."""
    source = config.get("model_source", "")
    flags = model_flags(source)
    if flags is None:
        return None
    opens_with = {**DEFAULTS, **preset_defaults(source)} if source else DEFAULTS
    for field in FLAG_FIELDS:
        value = config.get(field)
        if field in LEFT_OUT or value is None or value == opens_with.get(field):
            continue
        if field == "model" and source:
            continue  # the model source picks the model
        flags += [f"--{field.replace('_', '-')}", str(value)]
    for field, (value, flag) in SWITCHES.items():
        if config.get(field) == value and opens_with.get(field) != value:
            flags.append(flag)
    if config.get("model_overrides"):
        flags += ["--set", config["model_overrides"]]
    return flags


def fits_command(config: dict, card: str | None = None, capacity_gib: float | None = None, measure: bool = True):
    """`.venv/bin/python -m experiments fits ...` (README's environment) for this configuration on a card by name (or
    of `capacity_gib`), with --measure; None where the model cannot be named on a command line."""
    flags = config_flags(config)
    if flags is None:
        return None
    where = ["--card", card] if card else ["--capacity-gib", f"{capacity_gib:g}"]
    return shlex.join(
        [".venv/bin/python", "-m", "experiments", "fits", *where, *flags, *(["--measure"] if measure else [])]
    )
