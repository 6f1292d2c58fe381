"""A 4-bit base for QLoRA, built as `from_pretrained(..., quantization_config=BitsAndBytesConfig(load_in_4bit=True))`
loads one: the model's skeleton on the meta device, then each linear layer but the output head as bitsandbytes'
`Linear4bit`, its weight made in the model's dtype, quantized by bitsandbytes (`quantize_4bit`: NF4 or FP4 in
64-element blocks, double quantization of the block scales) and the full-precision weight freed before the next
layer's; then the rest of the model (embeddings, norms, the head) on the device with transformers' own
initialisation. The loading peak is the quantized model and one layer's weight, as from_pretrained's, not the
full-precision model. Then peft's `prepare_model_for_kbit_training`, as tutorials call it: every parameter frozen and
every non-4-bit parameter upcast to fp32 (norms, embeddings, the head)."""

from __future__ import annotations

import torch
from torch import nn

from ..core.config import ExperimentConfig

BLOCKSIZE = 64  # bitsandbytes' default for 4-bit weights
INT8_THRESHOLD = 6.0  # BitsAndBytesConfig's llm_int8_threshold
COMPUTE_DTYPES = {"bf16": torch.bfloat16, "amp_bf16": torch.bfloat16, "amp_fp16": torch.float16}


def compute_dtype(cfg: ExperimentConfig) -> torch.dtype:
    """bnb_4bit_compute_dtype from the precision: bf16 for bf16 and AMP bf16, fp16 for AMP fp16, else fp32."""
    return COMPUTE_DTYPES.get(cfg.precision, torch.float32)


def _linear_like(module: nn.Module) -> bool:
    return isinstance(module, nn.Linear) or type(module).__name__ == "Conv1D"


def _head_names(model: nn.Module) -> set[str]:
    """What transformers' bitsandbytes integration keeps in full precision: the output embeddings (the head)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return {name for name, m in model.named_modules() if m is head}


def build_quantized(spec, cfg: ExperimentConfig, device: torch.device) -> nn.Module:
    import bitsandbytes as bnb
    from peft import prepare_model_for_kbit_training

    model = spec.build(cfg, torch.device("meta"))
    dtype = torch.bfloat16 if cfg.precision == "bf16" else torch.float32
    std = getattr(model.config, "initializer_range", 0.02)
    skip = _head_names(model)
    targets = [(n, m) for n, m in model.named_modules() if _linear_like(m) and n not in skip]
    for name, linear in targets:
        parent, _, leaf = name.rpartition(".")
        # GPT-2's Conv1D keeps its weight as (in, out): its Linear4bit is (out, in), as transformers' integration makes.
        out_features, in_features = (
            linear.weight.shape[::-1] if type(linear).__name__ == "Conv1D" else linear.weight.shape
        )
        weight = torch.empty((out_features, in_features), dtype=dtype, device=device).normal_(0.0, std)
        q = (_int8 if cfg.finetune == "int8" else _nf4)(cfg, weight, linear.bias is not None)
        del weight
        if q.bias is not None:
            q.bias = nn.Parameter(torch.zeros(out_features, dtype=dtype, device=device))
        (model.get_submodule(parent) if parent else model).register_module(leaf, q)
    kinds = (bnb.nn.Linear4bit, bnb.nn.Linear8bitLt)
    quantized = {id(m) for m in model.modules() if isinstance(m, kinds)}
    for module in model.modules():
        if id(module) not in quantized:
            _materialize(module, device)
    for module in model.modules():
        if id(module) in quantized:
            continue
        if any(id(m) in quantized for m in module.modules()):
            # transformers' initialisation of a block reaches into its layers (GPT-2's scaled c_proj), now 4-bit.
            for p in module.parameters(recurse=False):
                nn.init.normal_(p, 0.0, std)
        else:
            model._init_weights(module)  # transformers' own values (norms at one, rotary frequencies)
    model.tie_weights()
    # What from_pretrained sets, and what prepare_model_for_kbit_training reads.
    setattr(model, "is_loaded_in_8bit" if cfg.finetune == "int8" else "is_loaded_in_4bit", True)
    return prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)


def _nf4(cfg: ExperimentConfig, weight: torch.Tensor, bias: bool) -> nn.Module:
    """A Linear4bit holding `weight` in 4 bits (bitsandbytes' quantize_4bit, as Params4bit's own quantization)."""
    import bitsandbytes as bnb
    import bitsandbytes.functional as F

    out_features, in_features = weight.shape
    q = bnb.nn.Linear4bit(
        in_features,
        out_features,
        bias=bias,
        compute_dtype=compute_dtype(cfg),
        compress_statistics=cfg.double_quant,
        quant_type=cfg.quant_type,
        quant_storage=torch.uint8,
        device="meta",
    )
    packed, state = F.quantize_4bit(
        weight, blocksize=BLOCKSIZE, compress_statistics=cfg.double_quant, quant_type=cfg.quant_type
    )
    q.weight = bnb.nn.modules.Params4bit(  # the module's own name: the one Linear4bit's constructor calls
        packed,
        requires_grad=False,
        quant_state=state,
        blocksize=BLOCKSIZE,
        compress_statistics=cfg.double_quant,
        quant_type=cfg.quant_type,
        quant_storage=torch.uint8,
        module=q,
        bnb_quantized=True,
    )
    return q


def _int8(cfg: ExperimentConfig, weight: torch.Tensor, bias: bool) -> nn.Module:
    """A Linear8bitLt holding `weight` in int8 with a scale per row, as Int8Params quantizes it (through fp16), and
    LLM.int8's outlier threshold as transformers' BitsAndBytesConfig sets it (6.0)."""
    import bitsandbytes as bnb
    import bitsandbytes.functional as F

    out_features, in_features = weight.shape
    q = bnb.nn.Linear8bitLt(
        in_features, out_features, bias=bias, has_fp16_weights=False, threshold=INT8_THRESHOLD, device="meta"
    )
    half = weight.contiguous().to(dtype=torch.float16)
    rows, scales, _ = F.int8_vectorwise_quant(half)
    del half
    q.weight = bnb.nn.modules.Int8Params(rows, requires_grad=False, has_fp16_weights=False, CB=rows, SCB=scales)
    return q


def _materialize(module: nn.Module, device: torch.device) -> None:
    """`module.to_empty(device, recurse=False)` spelt out: a meta parameter becomes a new one on the device (the path
    nn.Module._apply takes for it), a meta buffer a new tensor."""
    for name, p in module._parameters.items():
        if p is not None and p.device.type == "meta":
            module._parameters[name] = nn.Parameter(torch.empty_like(p, device=device), requires_grad=p.requires_grad)
    for name, b in module._buffers.items():
        if b is not None and b.device.type == "meta":
            module._buffers[name] = torch.empty_like(b, device=device)
