"""The fine-tuning levers of a configuration (experiments/training/finetune.py builds them): the method (full training
or `peft` LoRA), LoRA's rank, alpha, target modules and adapter dtype, which layers are checkpointed, activation
offloading to host memory, and the bitsandbytes optimizers (8-bit AdamW, paged AdamW in 32 and 8 bits). Their ranges and the rules between them; the
configuration (experiments/core/config.py) merges them into its own. Torch-free."""

from __future__ import annotations

import importlib.util

from .errors import ConfigError

FINETUNES = ("full", "lora", "qlora", "int8")
# The methods that train LoRA adapters: on the model as built, on a 4-bit base (QLoRA), on an 8-bit base (LLM.int8).
LORA_METHODS = ("lora", "qlora", "int8")
QUANTIZED = ("qlora", "int8")
QUANT_TYPES = ("nf4", "fp4")
# "attention": every linear projection inside an attention block; "all_linear": peft's "all-linear" (every linear
# layer but the output head).
LORA_TARGETS = ("attention", "all_linear")
# peft's default (autocast_adapter_dtype=True) keeps the adapters in fp32 on a bf16 or fp16 model; "model": in the
# model's own dtype.
ADAPTER_DTYPES = ("fp32", "model")
# bitsandbytes' optimizers: their own kernels, one implementation each (optimizer_impl "default").
BNB_OPTIMIZERS = ("adamw8bit", "paged_adamw", "paged_adamw8bit")
PAGED_OPTIMIZERS = ("paged_adamw", "paged_adamw8bit")

RANGES = {"lora_rank": (1, 1024), "lora_alpha": (1, 4096), "checkpoint_every": (1, 128)}
CHOICES = {
    "finetune": FINETUNES,
    "lora_targets": LORA_TARGETS,
    "adapter_dtype": ADAPTER_DTYPES,
    "quant_type": QUANT_TYPES,
}
# The configuration's defaults of these fields: what every run recorded before they existed had.
DEFAULTS = {
    "finetune": "full",
    "lora_rank": 16,
    "lora_alpha": 32,
    "lora_targets": "attention",
    "adapter_dtype": "fp32",
    "checkpoint_every": 1,
    "offload_activations": False,
    "quant_type": "nf4",
    "double_quant": True,
}


def validate(cfg) -> None:
    """The rules between the fine-tuning levers and the rest of a configuration."""
    if cfg.finetune != "full" and not cfg.model_source.startswith(("preset:", "hf:")):
        raise ConfigError(
            "finetune",
            f"got {cfg.finetune!r}; LoRA and QLoRA apply to a preset or a Hugging Face model type (model_source), "
            "not to the built-in families",
            "needs_model_source",
            value=cfg.finetune,
        )
    if cfg.optimizer in BNB_OPTIMIZERS and cfg.optimizer_impl != "default":
        raise ConfigError(
            "optimizer_impl",
            f"got {cfg.optimizer_impl!r}; bitsandbytes' {cfg.optimizer} has one implementation: default",
            "one_impl",
            optimizer=cfg.optimizer,
        )
    if cfg.checkpoint_every > 1 and cfg.checkpoint != "per_layer":
        raise ConfigError(
            "checkpoint_every",
            f"got {cfg.checkpoint_every}; checkpointing every n-th layer needs checkpoint per_layer "
            f"(got {cfg.checkpoint!r})",
            "needs_per_layer",
            value=cfg.checkpoint_every,
        )


def check_device(cfg, device_type: str) -> None:
    """Offloading moves saved activations from a GPU to host memory: a CPU run has nowhere to move them."""
    if cfg.offload_activations and device_type != "cuda":
        raise ConfigError(
            "offload_activations",
            "moves saved activations from a GPU to host memory; on a CPU they are in host memory already: "
            "estimate it for CUDA, or run it on a GPU",
            "offload_on_cpu",
        )


def check_installed(cfg) -> None:
    """bitsandbytes' optimizers and the 4- and 8-bit bases need the package itself (requirements.txt has it): an
    install without it gets this one line from an estimate or a run, not a traceback from inside the replay."""
    field = "optimizer" if cfg.optimizer in BNB_OPTIMIZERS else "finetune" if cfg.finetune in QUANTIZED else None
    if field and importlib.util.find_spec("bitsandbytes") is None:
        value = getattr(cfg, field)
        raise ConfigError(
            field,
            f"got {value!r}; it needs bitsandbytes, which is not installed here (pip install bitsandbytes)",
            "needs_package",
            value=value,
            package="bitsandbytes",
        )
