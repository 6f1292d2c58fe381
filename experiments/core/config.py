"""The experiment configuration: one validated dataclass shared by the CLI, the app and the tests."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from types import SimpleNamespace

MODELS = ("mlp", "cnn", "transformer")
# fp32 is PyTorch's defaults (matmuls in full fp32, cuDNN convolutions in TF32); fp32_strict has no TF32 at all;
# tf32 lets matmuls use it too (experiments/training/fp32_math.py).
PRECISIONS = ("fp32", "fp32_strict", "tf32", "amp_fp16", "amp_bf16", "bf16")
CHECKPOINTS = ("none", "per_layer", "segments")
OPTIMIZERS = ("sgd", "sgd_momentum", "adam", "adamw")
OPTIMIZER_IMPLS = ("default", "foreach", "fused", "for-loop")
DEVICES = ("auto", "cuda", "cpu")

# Inclusive integer ranges. Generous enough for an H200, small enough that a typo
# (batch=10**9) is refused instead of being tried.
RANGES = {
    "layers": (1, 128),
    "width": (8, 16384),
    "batch": (1, 65536),
    "seq_len": (1, 8192),
    "heads": (1, 128),
    "image_size": (8, 512),
    "segments": (0, 128),
    "accum": (1, 64),
    "steps": (2, 50),
    "timing_steps": (0, 200),
    "seed": (0, 2**31 - 1),
}
CHOICES = {
    "model": MODELS,
    "precision": PRECISIONS,
    "checkpoint": CHECKPOINTS,
    "optimizer": OPTIMIZERS,
    "optimizer_impl": OPTIMIZER_IMPLS,
    "device": DEVICES,
}
BOOLS = ("zero_grad_to_none", "inplace", "force")


class ConfigError(ValueError):
    """A configuration value is out of range; `field` names the offending field.

    `code` and `params` say which rule failed with what values, so a page can word it in its own language
    (the app's `config.err.<code>`); the message is the engine's English wording of the same."""

    def __init__(self, field: str, message: str, code: str | None = None, **params):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.code = code
        self.params = params


@dataclass(frozen=True)
class ExperimentConfig:
    model: str = "mlp"
    layers: int = 8
    width: int = 1024
    batch: int = 64
    seq_len: int = 128  # transformer only
    heads: int = 8  # transformer only
    image_size: int = 224  # cnn only (3 x image_size x image_size inputs)
    precision: str = "fp32"
    checkpoint: str = "none"
    segments: int = 0  # layers per checkpointed segment; 0 = about sqrt(layers); more than layers = one segment
    accum: int = 1
    optimizer: str = "adam"
    optimizer_impl: str = "default"
    zero_grad_to_none: bool = True
    inplace: bool = False
    steps: int = 3
    timing_steps: int = 5  # extra un-instrumented steps for the step-time statistics
    device: str = "auto"
    seed: int = 0
    budget_mb: float | None = None
    force: bool = False  # run even if the estimate says it will not fit

    def __post_init__(self):
        validate(self)

    @property
    def micro_batch(self) -> int:
        return self.batch // self.accum

    @property
    def segment_size(self) -> int:
        """Layers per checkpointed segment (resolves the 0 = auto default)."""
        if self.segments:
            return min(self.segments, self.layers)
        return max(1, round(math.sqrt(self.layers)))

    def to_dict(self) -> dict:
        return asdict(self)

    def replace(self, **changes) -> ExperimentConfig:
        data = self.to_dict()
        data.update(changes)
        return ExperimentConfig.from_dict(data)

    @classmethod
    def from_dict(cls, data: dict) -> ExperimentConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(unknown[0], f"unknown field; known fields are {', '.join(sorted(known))}")
        return cls(**{k: _coerce(k, v) for k, v in data.items()})

    @classmethod
    def field_value(cls, name: str, raw):
        """One field's value from a query string or JSON, checked by the same rules as a whole configuration
        (rules between fields aside): how a shared link's values are read."""
        if name not in {f.name for f in fields(cls)}:
            raise ConfigError(name, "unknown field", "unknown")
        value = _coerce(name, raw)
        validate(SimpleNamespace(**(asdict(cls()) | {name: value})), single=name)
        return value


def _coerce(name: str, value):
    """Accept the strings that query parameters and JSON hand us, and fail with the field name."""
    if name in RANGES:
        if isinstance(value, bool):
            raise ConfigError(name, f"must be an integer, got {value!r}")
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                raise ConfigError(name, f"must be an integer, got {value!r}") from None
        return value
    if name in BOOLS and isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ConfigError(name, f"must be true or false, got {value!r}")
    if name == "budget_mb" and isinstance(value, str):
        if value.strip().lower() in ("", "none", "null"):
            return None
        try:
            return float(value)
        except ValueError:
            raise ConfigError(name, f"must be a number of megabytes, got {value!r}") from None
    return value


def validate(cfg: ExperimentConfig, single: str | None = None) -> None:
    """`single`: check only that field's own rules (its choices or range), not the rules between fields."""
    for name, allowed in CHOICES.items():
        if single and name != single:
            continue
        value = getattr(cfg, name)
        if value not in allowed:
            raise ConfigError(name, f"got {value!r}; allowed: {', '.join(allowed)}", "choice", value=value,
                              allowed=", ".join(allowed))
    for name, (lo, hi) in RANGES.items():
        if single and name != single:
            continue
        value = getattr(cfg, name)
        if not isinstance(value, int) or isinstance(value, bool):
            raise ConfigError(name, f"must be an integer in [{lo}, {hi}], got {value!r}", "range", value=value,
                              lo=lo, hi=hi)
        if not lo <= value <= hi:
            raise ConfigError(name, f"got {value}; allowed range is [{lo}, {hi}]", "range", value=value, lo=lo, hi=hi)
    for name in BOOLS:
        if (not single or name == single) and not isinstance(getattr(cfg, name), bool):
            raise ConfigError(name, f"must be true or false, got {getattr(cfg, name)!r}")
    if single and single != "budget_mb":
        return
    if cfg.batch % cfg.accum:
        raise ConfigError(
            "batch", f"batch {cfg.batch} must be divisible by accum {cfg.accum} (micro-batch = batch / accum)",
            "batch_accum", batch=cfg.batch, accum=cfg.accum)
    if cfg.model == "transformer" and cfg.width % cfg.heads:
        raise ConfigError("heads", f"width {cfg.width} must be divisible by heads {cfg.heads}",
                          "heads_divide", width=cfg.width, heads=cfg.heads)
    if cfg.model == "transformer" and (cfg.width // cfg.heads) % 8:
        raise ConfigError("heads", f"head dimension width/heads = {cfg.width // cfg.heads} must be a multiple of 8",
                          "head_dim", dim=cfg.width // cfg.heads)
    if cfg.model == "cnn" and cfg.width > 512:
        raise ConfigError("width", f"got {cfg.width}; for the cnn, width is the channel count, allowed range is [8, 512]",
                          "cnn_width", width=cfg.width)
    if cfg.model == "cnn" and cfg.layers > 16:
        raise ConfigError("layers", f"got {cfg.layers}; the cnn allows [1, 16] conv layers", "cnn_layers",
                          layers=cfg.layers)
    if cfg.budget_mb is not None:
        if isinstance(cfg.budget_mb, bool) or not isinstance(cfg.budget_mb, (int, float)):
            raise ConfigError("budget_mb", f"must be a number of megabytes, got {cfg.budget_mb!r}")
        if not 1 <= cfg.budget_mb <= 10_000_000:
            raise ConfigError("budget_mb", f"got {cfg.budget_mb}; allowed range is [1, 10000000] MB, or none")
