"""Which model a configuration trains when it is not one of the built-in families: its source (a preset of
model_presets.json, a Hugging Face `model_type`, a torchvision name) and the allow-listed, capped overrides of its
shape. Names and numbers only: an import path runs the learner's own code, so it never enters a configuration (the
command line passes it to the engine as a spec object, experiments/training/source_models.py). Torch-free: the
configuration's validation and the lesson read it.

    preset:llama3-8b          a preset at full size
    preset:llama3-8b:tiny     its CPU-sized variant (the real CPU runs and the tests)
    hf:qwen2                  a model_type of the installed transformers (checked when the model is built)
    hf:bert:sequence_classification   the same, with the head named (else the first of HF_TASKS it has)
    torchvision:resnet50      a torchvision classification model, where torchvision imports
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

from .errors import ConfigError

PRESETS_PATH = Path(__file__).with_name("model_presets.json")
KINDS = ("preset", "hf", "torchvision")
SIZES = ("tiny",)
# The heads a Hugging Face architecture can be trained with here, in the order a bare model_type picks one: an
# encoder such as BERT has a causal-LM head too (BertLMHeadModel), but it is pre-trained as a masked LM; T5 has only
# its encoder-decoder head. `hf:NAME:TASK` names another.
HF_TASKS = ("masked_lm", "causal_lm", "image_classification", "seq2seq_lm", "sequence_classification")
TEXT_TASKS = ("masked_lm", "causal_lm", "seq2seq_lm", "sequence_classification")

# The numeric settings a learner may change: generic name -> (the config attributes it may be called, in order;
# inclusive range, or bool). The first name the config class knows is the one set, so GPT-2's n_layer and
# Mixtral's num_local_experts are reached by the same override.
OVERRIDES: dict[str, tuple[tuple[str, ...], tuple[int, int] | type]] = {
    "layers": (("num_hidden_layers", "n_layer", "num_layers"), (1, 256)),
    "hidden": (("hidden_size", "n_embd", "d_model"), (8, 32768)),
    "intermediate": (
        ("intermediate_size", "n_inner", "ffn_dim", "d_ff", "encoder_ffn_dim", "ffn_hidden_size", "d_inner"),
        (8, 262144),
    ),
    "heads": (("num_attention_heads", "n_head"), (1, 256)),
    "kv_heads": (("num_key_value_heads", "num_kv_heads"), (1, 256)),
    "vocab": (("vocab_size",), (2, 1_048_576)),
    "experts": (("num_local_experts", "num_experts", "n_routed_experts"), (1, 1024)),
    "tie_embeddings": (("tie_word_embeddings",), bool),
    "max_positions": (("max_position_embeddings", "n_positions"), (1, 1_048_576)),
    "classes": (("num_labels",), (1, 100_000)),
}
# An encoder-decoder's second stack takes the same value (BART's decoder_layers beside encoder_layers, which its
# num_hidden_layers means): every one of these names its config knows is set too.
DECODER_TWINS: dict[str, tuple[str, ...]] = {
    "layers": ("decoder_layers", "num_decoder_layers"),
    "heads": ("decoder_attention_heads",),
    "intermediate": ("decoder_ffn_dim",),
}
# An import path (the command line's --import) and the losses its model trains with: checked before torch is imported.
IMPORT_PATH = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")
LOSSES = ("model", "ce", "mse", "mean")
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


@functools.lru_cache(maxsize=1)
def presets() -> dict[str, dict]:
    data = json.loads(PRESETS_PATH.read_text(encoding="utf-8"))
    return {p["id"]: p for p in data["presets"]}


def parse_source(source: str) -> tuple[str, str, str | None]:
    """(kind, name, variant) of a source string: a preset's size or an hf source's head (None when not given);
    ConfigError naming `model_source` when it is not one."""
    parts = source.split(":") if isinstance(source, str) else []
    kind = parts[0] if parts else ""
    if kind == "import":
        raise ConfigError(
            "model_source",
            "an import path runs your own code: the command line only (python -m experiments ... --import)",
            "choice",
            value=source,
            allowed=", ".join(KINDS),
        )
    if kind == "preset" and len(parts) in (2, 3) and parts[1] not in presets():  # any name: the presets it may be
        known = ", ".join(presets())
        raise ConfigError(
            "model_source", f"unknown preset {parts[1]!r}; allowed: {known}", "unknown", value=parts[1], known=known
        )
    if kind not in KINDS or len(parts) not in (2, 3) or not _NAME.fullmatch(parts[1]):
        raise ConfigError(
            "model_source",
            f"got {source!r}; expected KIND:NAME with KIND one of {', '.join(KINDS)}",
            "choice",
            value=source,
            allowed=", ".join(KINDS),
        )
    size = parts[2] if len(parts) == 3 else None
    if size is not None and kind == "hf" and size not in HF_TASKS:
        allowed = ", ".join(HF_TASKS)
        raise ConfigError(
            "model_source",
            f"got {source!r}; the head of hf:NAME:HEAD is one of {allowed}",
            "choice",
            value=size,
            allowed=allowed,
        )
    if size is not None and kind != "hf" and (kind != "preset" or size not in SIZES):
        raise ConfigError(
            "model_source",
            f"got {source!r}; only a preset has a size (:tiny), only hf:NAME a head (:{'|'.join(HF_TASKS)})",
            "choice",
            value=size,
            allowed="tiny",
        )
    return kind, parts[1], size


def parse_overrides(text: str) -> dict:
    """`layers=4,hidden=512` -> {"layers": 4, "hidden": 512}, every name allow-listed and every value in its range."""
    if not isinstance(text, str):
        raise ConfigError(
            "model_overrides",
            f"must be NAME=VALUE,..., got {text!r}",
            "unknown",
            value=text,
            known=", ".join(OVERRIDES),
        )
    out: dict = {}
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        name, eq, raw = (s.strip() for s in item.partition("="))
        if name not in OVERRIDES or not eq:
            raise ConfigError(
                "model_overrides",
                f"{item!r} is not NAME=VALUE with NAME one of {', '.join(OVERRIDES)}",
                "unknown",
                value=name,
                known=", ".join(OVERRIDES),
            )
        out[name] = override_value(name, raw)
    return out


def override_value(name: str, raw):
    rule = OVERRIDES[name][1]
    if rule is bool:
        if isinstance(raw, bool):
            return raw
        if str(raw).strip().lower() in ("true", "false", "1", "0"):
            return str(raw).strip().lower() in ("true", "1")
        raise ConfigError(
            "model_overrides", f"{name} must be true or false, got {raw!r}", "choice", value=raw, allowed="true, false"
        )
    lo, hi = rule
    try:
        value = int(str(raw).strip()) if not isinstance(raw, int) or isinstance(raw, bool) else raw
    except ValueError:
        value = None
    if value is None or isinstance(raw, bool) or not lo <= value <= hi:
        raise ConfigError(
            "model_overrides",
            f"{name}: got {raw!r}; allowed: an integer in [{lo}, {hi}]",
            "range",
            value=raw,
            lo=lo,
            hi=hi,
        )
    return value


def format_overrides(overrides: dict) -> str:
    return ",".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in overrides.items())


def preset_config(preset_id: str, tiny: bool) -> tuple[dict, dict]:
    """(the preset's model config, its default levers), with the tiny variant's entries on top when asked."""
    p = presets()[preset_id]
    config, defaults = dict(p.get("config", {})), dict(p.get("defaults", {}))
    if tiny:
        config.update(p["tiny"].get("config", {}))
        defaults.update({k: v for k, v in p["tiny"].items() if k != "config"})
    return config, defaults


def preset_defaults(source: str) -> dict:
    """The levers a preset opens with (batch, seq_len or image_size, precision, optimizer, implementation)."""
    kind, name, size = parse_source(source)
    return preset_config(name, size == "tiny")[1] if kind == "preset" else {}


def task_of(source: str) -> str | None:
    """A preset's task (causal_lm, masked_lm, image_classification), an hf source's named head; None where only the
    library knows (a bare hf:NAME)."""
    kind, name, variant = parse_source(source)
    if kind == "preset":
        return presets()[name]["source"].get("task")
    if kind == "hf":
        return variant
    return "image_classification"


def validate_source(cfg, single: str | None = None) -> None:
    """The configuration rules of a model source (ExperimentConfig's validation calls it when one is set);
    `single`: that field's own rules only."""
    if single == "model_source":
        return None if not cfg.model_source else parse_source(cfg.model_source) and None
    if single == "model_overrides":
        return parse_overrides(cfg.model_overrides) and None
    if not cfg.model_source:
        raise ConfigError(
            "model_overrides",
            "overrides need a model_source",
            "unknown",
            value=cfg.model_overrides,
            known="model_source",
        )
    parse_source(cfg.model_source)
    overrides = parse_overrides(cfg.model_overrides)
    if overrides and cfg.model_source.startswith("torchvision:") and set(overrides) - {"classes"}:
        raise ConfigError(
            "model_overrides",
            "a torchvision model takes only the classes override",
            "unknown",
            value=",".join(sorted(set(overrides) - {"classes"})),
            known="classes",
        )
    if cfg.checkpoint == "segments":
        raise ConfigError(
            "checkpoint",
            "got 'segments'; a model of your own checkpoints every block: allowed: none, per_layer",
            "choice",
            value=cfg.checkpoint,
            allowed="none, per_layer",
        )
