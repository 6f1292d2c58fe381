"""The experiment configuration: one validated dataclass shared by the CLI, the app and the tests; the data-parallel
configuration built on it (DistributedConfig); the gradient tolerance of each precision. The rules' error codes are
experiments/core/errors.py's. Torch-free."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from types import SimpleNamespace

from . import finetune
from .errors import ConfigError
from .model_sources import validate_source

MODELS = ("mlp", "cnn", "transformer")
# fp32: PyTorch's defaults (fp32 matmuls, TF32 cuDNN convolutions); fp32_strict: no TF32; tf32: matmuls in TF32 too.
PRECISIONS = ("fp32", "fp32_strict", "tf32", "amp_fp16", "amp_bf16", "bf16")
CHECKPOINTS = ("none", "per_layer", "segments")
TORCH_OPTIMIZERS = ("sgd", "sgd_momentum", "adam", "adamw")
OPTIMIZERS = (*TORCH_OPTIMIZERS, *finetune.BNB_OPTIMIZERS)
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
    **finetune.RANGES,
}
CHOICES = {
    "model": MODELS,
    "precision": PRECISIONS,
    "checkpoint": CHECKPOINTS,
    "optimizer": OPTIMIZERS,
    "optimizer_impl": OPTIMIZER_IMPLS,
    "device": DEVICES,
    **finetune.CHOICES,
}
BOOLS = ("zero_grad_to_none", "inplace", "force", "offload_activations", "double_quant")
BUDGET_MB = (1, 10_000_000)  # a memory budget's range in MB (or none)


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
    # A model of the learner's own instead of the built-in family `model` (experiments/core/model_sources.py):
    # "preset:llama3-8b", "preset:llama3-8b:tiny", "hf:<model_type>", "torchvision:<name>"; "" = the family.
    model_source: str = ""
    model_overrides: str = ""  # "layers=4,hidden=512": allow-listed shape overrides of model_source, capped
    # Fine-tuning (experiments/core/finetune.py): full training or peft's LoRA, and which layers are checkpointed.
    finetune: str = "full"
    lora_rank: int = 16
    lora_alpha: int = 32
    lora_targets: str = "attention"
    adapter_dtype: str = "fp32"
    checkpoint_every: int = 1  # with checkpoint per_layer: every n-th layer (transformers' every_n_layers)
    offload_activations: bool = False  # saved activations in pinned host memory (torch.autograd.graph.save_on_cpu)
    quant_type: str = "nf4"  # qlora: bitsandbytes' 4-bit data type (nf4, fp4)
    double_quant: bool = True  # qlora: the block scales quantized too (bnb_4bit_use_double_quant)

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
            raise ConfigError(
                unknown[0],
                f"unknown field; known fields are {', '.join(sorted(known))}",
                "unknown",
                value=unknown[0],
                known=", ".join(sorted(known)),
            )
        return cls(**{k: _coerce(k, v) for k, v in data.items()})

    @classmethod
    def field_value(cls, name: str, raw):
        """One field's value from a query string or JSON, checked by the same rules as a whole configuration
        (rules between fields aside): how a shared link's values are read."""
        known = sorted(f.name for f in fields(cls))
        if name not in known:
            raise ConfigError(name, "unknown field", "unknown", value=name, known=", ".join(known))
        value = _coerce(name, raw)
        validate(SimpleNamespace(**(asdict(cls()) | {name: value})), single=name)
        return value


def _coerce(name: str, value):
    """Accept the strings that query parameters and JSON hand us, and fail with the field name."""
    if name in RANGES:
        lo, hi = RANGES[name]
        if isinstance(value, bool):
            raise ConfigError(name, not_integer(value, lo, hi), "range", value=value, lo=lo, hi=hi)
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                raise ConfigError(name, not_integer(value, lo, hi), "range", value=value, lo=lo, hi=hi) from None
        return value
    if name in BOOLS and isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ConfigError(name, f"must be true or false, got {value!r}", "choice", value=value, allowed="true, false")
    if name == "budget_mb" and isinstance(value, str):
        if value.strip().lower() in ("", "none", "null"):
            return None
        try:
            return float(value)
        except ValueError:
            raise ConfigError(
                name,
                not_megabytes(value, *BUDGET_MB),
                "range",
                value=value,
                lo=BUDGET_MB[0],
                hi=BUDGET_MB[1],
            ) from None
    return value


def not_integer(value, lo: int, hi: int) -> str:  # the command line's words too (cli_checks.py)
    return f"must be an integer in [{lo}, {hi}], got {value!r}"


def not_megabytes(value, lo: int, hi: int) -> str:
    return f"must be a number of megabytes in [{lo}, {hi}], or none; got {value!r}"


def validate(cfg: ExperimentConfig, single: str | None = None) -> None:
    """`single`: check only that field's own rules (its choices or range), not the rules between fields."""
    for name, allowed in CHOICES.items():
        if single and name != single:
            continue
        value = getattr(cfg, name)
        if value not in allowed:
            raise ConfigError(
                name, f"got {value!r}; allowed: {', '.join(allowed)}", "choice", value=value, allowed=", ".join(allowed)
            )
    for name, (lo, hi) in RANGES.items():
        if single and name != single:
            continue
        value = getattr(cfg, name)
        if not isinstance(value, int) or isinstance(value, bool):
            raise ConfigError(
                name, f"must be an integer in [{lo}, {hi}], got {value!r}", "range", value=value, lo=lo, hi=hi
            )
        if not lo <= value <= hi:
            raise ConfigError(name, f"got {value}; allowed range is [{lo}, {hi}]", "range", value=value, lo=lo, hi=hi)
    for name in BOOLS:
        if (not single or name == single) and not isinstance(getattr(cfg, name), bool):
            raise ConfigError(
                name,
                f"must be true or false, got {getattr(cfg, name)!r}",
                "choice",
                value=getattr(cfg, name),
                allowed="true, false",
            )
    if single in ("model_source", "model_overrides"):
        return validate_source(cfg, single)
    if single:
        return _validate_budget(cfg) if single == "budget_mb" else None
    if cfg.model_source or cfg.model_overrides:
        validate_source(cfg)
    if cfg.batch % cfg.accum:
        raise ConfigError(
            "batch",
            f"batch {cfg.batch} must be divisible by accum {cfg.accum} (micro-batch = batch / accum)",
            "batch_accum",
            batch=cfg.batch,
            accum=cfg.accum,
        )
    finetune.validate(cfg)
    if cfg.model_source:
        _validate_budget(cfg)
        return  # the family's shape rules (width, heads, layers) do not apply to a model of one's own
    if cfg.model == "transformer" and cfg.width % cfg.heads:
        raise ConfigError(
            "heads",
            f"width {cfg.width} must be divisible by heads {cfg.heads}",
            "heads_divide",
            width=cfg.width,
            heads=cfg.heads,
        )
    if cfg.model == "transformer" and (cfg.width // cfg.heads) % 8:
        raise ConfigError(
            "heads",
            f"head dimension width/heads = {cfg.width // cfg.heads} must be a multiple of 8",
            "head_dim",
            dim=cfg.width // cfg.heads,
        )
    if cfg.model == "cnn" and cfg.width > 512:
        raise ConfigError(
            "width",
            f"got {cfg.width}; for the cnn, width is the channel count, allowed range is [8, 512]",
            "cnn_width",
            width=cfg.width,
        )
    if cfg.model == "cnn" and cfg.layers > 16:
        raise ConfigError(
            "layers", f"got {cfg.layers}; the cnn allows [1, 16] conv layers", "cnn_layers", layers=cfg.layers
        )
    _validate_budget(cfg)


def _validate_budget(cfg) -> None:
    if cfg.budget_mb is not None:
        lo, hi = BUDGET_MB
        if isinstance(cfg.budget_mb, bool) or not isinstance(cfg.budget_mb, (int, float)):
            raise ConfigError(
                "budget_mb",
                not_megabytes(cfg.budget_mb, lo, hi),
                "range",
                value=cfg.budget_mb,
                lo=lo,
                hi=hi,
            )
        if not lo <= cfg.budget_mb <= hi:
            raise ConfigError(
                "budget_mb",
                f"got {cfg.budget_mb}; allowed range is [{lo}, {hi}] MB, or none",
                "range",
                value=cfg.budget_mb,
                lo=lo,
                hi=hi,
            )


# How a data-parallel run spreads the sandbox's configuration (experiments/distributed/).
STRATEGIES = ("ddp", "ddp_zero1", "fsdp2_zero2", "fsdp2_zero3", "fsdp2_offload")
CUDA_ONLY = ("fsdp2_offload",)  # CPUOffloadPolicy copies shards to an accelerator; there is none on a CPU run
BATCH_MODES = ("per_rank", "global")
WORLD_SIZE = (1, 8)
EXTRA = ("strategy", "world_size", "batch_mode", "check_update")


def _one_of(field: str, value, allowed: tuple) -> None:
    if value not in allowed:
        raise ConfigError(
            field, f"got {value!r}; allowed: {', '.join(allowed)}", "choice", value=value, allowed=", ".join(allowed)
        )


@dataclass(frozen=True)
class DistributedConfig:
    """The sandbox configuration, plus how it is spread. `config.batch` is per rank or global (batch_mode)."""

    config: ExperimentConfig
    strategy: str = "ddp"
    world_size: int = 2
    batch_mode: str = "per_rank"
    check_update: bool = True

    def __post_init__(self):
        _one_of("strategy", self.strategy, STRATEGIES)
        lo, hi = WORLD_SIZE
        if not isinstance(self.world_size, int) or isinstance(self.world_size, bool) or not lo <= self.world_size <= hi:
            raise ConfigError(
                "world_size",
                f"got {self.world_size!r}; allowed range is [{lo}, {hi}]",
                "range",
                value=self.world_size,
                lo=lo,
                hi=hi,
            )
        _one_of("batch_mode", self.batch_mode, BATCH_MODES)
        if self.batch_mode == "global" and self.config.batch % self.world_size:
            raise ConfigError(
                "batch",
                f"global batch {self.config.batch} must be divisible by world_size {self.world_size}",
                "global_batch",
                batch=self.config.batch,
                world_size=self.world_size,
            )
        if self.per_rank_batch % self.config.accum:
            raise ConfigError(
                "batch",
                f"per-rank batch {self.per_rank_batch} must be divisible by accum {self.config.accum}",
                "batch_accum",
                batch=self.per_rank_batch,
                accum=self.config.accum,
            )
        if self.config.finetune != "full" or self.config.optimizer in finetune.BNB_OPTIMIZERS:
            field = "finetune" if self.config.finetune != "full" else "optimizer"
            raise ConfigError(
                field,
                f"got {getattr(self.config, field)!r}; a data-parallel run here trains every parameter with torch's "
                "optimizers (full, and sgd, sgd_momentum, adam or adamw)",
                "choice",
                value=getattr(self.config, field),
                allowed="full" if field == "finetune" else "sgd, sgd_momentum, adam, adamw",
            )
        if (
            self.strategy.startswith("fsdp2")
            and self.config.optimizer_impl == "fused"
            and self.config.optimizer.startswith("sgd")
        ):
            # torch has no DTensor rule for aten._fused_sgd_: the sharded step would stop with NotImplementedError.
            raise ConfigError(
                "optimizer_impl",
                "got 'fused'; FSDP2's sharded parameters have no fused SGD "
                "step: allowed with SGD are default, foreach and for-loop",
                "fsdp_fused_sgd",
            )

    @property
    def per_rank_batch(self) -> int:
        return self.config.batch // self.world_size if self.batch_mode == "global" else self.config.batch

    @property
    def global_batch(self) -> int:
        return self.per_rank_batch * self.world_size

    @property
    def rank_config(self) -> ExperimentConfig:
        """What every rank runs: the configuration at the per-rank batch."""
        return self.config.replace(batch=self.per_rank_batch)

    @property
    def global_config(self) -> ExperimentConfig:
        """The single-device run with the same global batch (the update check's baseline)."""
        return self.config.replace(batch=self.global_batch)

    def to_dict(self) -> dict:
        return {
            **self.config.to_dict(),
            "strategy": self.strategy,
            "world_size": self.world_size,
            "batch_mode": self.batch_mode,
            "check_update": self.check_update,
        }

    @classmethod
    def from_dict(cls, data: dict) -> DistributedConfig:
        data = dict(data)
        extra = {k: data.pop(k) for k in EXTRA if k in data}
        if isinstance(extra.get("world_size"), str):
            try:
                extra["world_size"] = int(extra["world_size"])
            except ValueError:
                n, (lo, hi) = extra["world_size"], WORLD_SIZE
                raise ConfigError("world_size", not_integer(n, lo, hi), "range", value=n, lo=lo, hi=hi) from None
        if isinstance(extra.get("check_update"), str):
            extra["check_update"] = extra["check_update"].strip().lower() in ("1", "true", "yes", "on")
        return cls(ExperimentConfig.from_dict(data), **extra)
