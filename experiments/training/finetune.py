"""Fine-tuning as people do it, with the libraries they call: peft's LoRA on a Hugging Face model (get_peft_model,
which freezes the base weights and, by default, keeps the adapters in fp32: `autocast_adapter_dtype`), and
bitsandbytes' optimizers (8-bit AdamW, paged AdamW in 32 and 8 bits). Built from the configuration's levers
(experiments/core/finetune.py)."""

from __future__ import annotations

import contextlib
import re

import torch
from torch import nn

from ..core.config import ExperimentConfig
from ..core.finetune import BNB_OPTIMIZERS, check_device

# A module path component naming an attention block: LLaMA's self_attn, GPT-2's attn, BERT's attention, ViT's
# attention, T5's SelfAttention, Mixtral's self_attn.
_ATTENTION = re.compile(r"attn|attention", re.IGNORECASE)


def _linear_like(module: nn.Module) -> bool:
    # transformers' GPT-2 family computes its projections with Conv1D (a transposed linear layer); peft adapts both.
    return isinstance(module, nn.Linear) or type(module).__name__ == "Conv1D"


def attention_targets(model: nn.Module) -> list[str]:
    """The names of every linear projection inside an attention block (q, k, v and output projections, fused
    qkv where a model fuses them), the way one lists them for peft's `target_modules`."""
    return [
        name
        for name, module in model.named_modules()
        if _linear_like(module) and any(_ATTENTION.search(part) for part in name.split(".")[:-1])
    ]


def apply_lora(model: nn.Module, cfg: ExperimentConfig) -> nn.Module:
    """`model` wrapped by peft's get_peft_model: frozen base weights, trainable LoRA adapters on cfg's targets."""
    from peft import LoraConfig, get_peft_model

    from ..core.config import ConfigError

    if cfg.lora_targets == "all_linear":
        targets = "all-linear"
    else:
        targets = attention_targets(model)
        if not targets:
            raise ConfigError(
                "lora_targets",
                "this model has no linear layer inside an attention block; choose all_linear",
                "choice",
                value=cfg.lora_targets,
                allowed="all_linear",
            )
    # A causal LM as tutorials wrap it (task_type CAUSAL_LM); other models in the plain PeftModel, called as they are.
    task = "CAUSAL_LM" if type(model).__name__.endswith("ForCausalLM") else None
    # GPT-2's Conv1D keeps its weight transposed: said up front, as its tutorials do, rather than fixed by a warning.
    transposed = any(type(m).__name__ == "Conv1D" for m in model.modules())
    config = LoraConfig(
        r=cfg.lora_rank,
        lora_alpha=cfg.lora_alpha,
        target_modules=targets,
        lora_dropout=0.0,
        task_type=task,
        fan_in_fan_out=transposed,
    )
    return get_peft_model(model, config, autocast_adapter_dtype=cfg.adapter_dtype == "fp32")


def load_libraries(cfg: ExperimentConfig, device: torch.device) -> None:
    """Imports what cfg's levers use, and fills bitsandbytes' caches on `device`. peft and bitsandbytes make small
    tensors when first imported or first quantizing (its 256-value map for the scales' quantization, the 4-bit code's
    bounds), kept for the process's life: made before a measured or replayed run's first phase, no phase holds them,
    whichever ran first in the process."""
    if cfg.finetune != "full":
        import peft  # noqa: F401
    if cfg.optimizer in BNB_OPTIMIZERS or cfg.finetune in ("qlora", "int8"):
        import bitsandbytes  # noqa: F401
    if cfg.finetune == "qlora":
        from bitsandbytes import functional

        functional.quantize_4bit(torch.zeros(64, device=device), quant_type=cfg.quant_type, compress_statistics=True)


def trainable(params) -> list[torch.nn.Parameter]:
    """What an optimizer is given: the parameters that train (LoRA's adapters; every parameter otherwise)."""
    return [p for p in params if p.requires_grad]


def bnb_optimizer(cfg: ExperimentConfig, params) -> torch.optim.Optimizer:
    """bitsandbytes' AdamW: 8-bit state (adamw8bit), or state in CUDA managed memory that the driver pages to host
    memory under pressure (paged_adamw, paged_adamw8bit; on a CPU bitsandbytes falls back to plain buffers)."""
    import bitsandbytes as bnb

    make = {
        "adamw8bit": bnb.optim.AdamW8bit,
        "paged_adamw": bnb.optim.PagedAdamW,
        "paged_adamw8bit": bnb.optim.PagedAdamW8bit,
    }
    return make[cfg.optimizer](params, lr=1e-4, weight_decay=0.01)


def offload_context(cfg: ExperimentConfig, device: torch.device):
    """Around the forward: every tensor autograd saves for backward goes to pinned host memory and comes back to the
    device in backward (torch.autograd.graph.save_on_cpu), when cfg offloads activations."""
    if not cfg.offload_activations:
        return contextlib.nullcontext()
    check_device(cfg, device.type)
    return torch.autograd.graph.save_on_cpu(pin_memory=True)
