"""A 4-bit base for QLoRA, built as `from_pretrained(..., quantization_config=BitsAndBytesConfig(load_in_4bit=True))`
loads one, in its order: the model's skeleton on the meta device with each linear layer but the output head as
bitsandbytes' `Linear4bit`; on a GPU, transformers' allocator warm-up (one segment of the loaded model's size);
then every tensor of the checkpoint in transformers' sorted order, a linear weight made in the model's dtype,
quantized by bitsandbytes (`quantize_4bit`: NF4 or FP4 in 64-element blocks, double quantization of the block
scales) and freed before the next tensor loads, every other tensor (embeddings, norms, the head) in the model's
dtype; then transformers' own initialisation of the values. The loading peak is the quantized model and one
layer's weight, as from_pretrained's, not the full-precision model, and the allocator's segments are laid out as
from_pretrained leaves them (docs/benchmarks/qlora-reserved-probe.md). Then peft's `prepare_model_for_kbit_training`,
as tutorials call it: every parameter frozen and every non-4-bit parameter upcast to fp32 (norms, embeddings, the
head)."""

from __future__ import annotations

import torch
from torch import nn

from ..core import warm_up_layout
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
    from peft import prepare_model_for_kbit_training

    model = spec.build(cfg, torch.device("meta"))
    dtype = torch.bfloat16 if cfg.precision == "bf16" else torch.float32
    std = getattr(model.config, "initializer_range", 0.02)
    skip = _head_names(model)
    int8 = cfg.finetune == "int8"
    # Replaced on the meta device before anything loads, as transformers' replace_with_bnb_linear does.
    shells: dict[str, tuple[nn.Module, bool]] = {}
    for name, linear in [(n, m) for n, m in model.named_modules() if _linear_like(m) and n not in skip]:
        parent, _, leaf = name.rpartition(".")
        conv1d = type(linear).__name__ == "Conv1D"
        # GPT-2's Conv1D keeps its weight as (in, out): its Linear4bit is (out, in), as transformers' integration makes.
        out_features, in_features = linear.weight.shape[::-1] if conv1d else linear.weight.shape
        shell = (_int8_shell if int8 else _nf4_shell)(cfg, in_features, out_features, linear.bias is not None)
        (model.get_submodule(parent) if parent else model).register_module(leaf, shell)
        shells[name] = (shell, conv1d)
    order = _load_order(model)
    _warm_up(model, order, shells, 1.0 if int8 else 0.5, device)
    for key in order:
        owner, _, leaf = key.rpartition(".")
        module = model.get_submodule(owner) if owner else model
        if owner in shells and leaf == "weight":
            shell, conv1d = shells[owner]
            # The checkpoint's tensor on the device in the model's dtype, quantized and freed before the next one
            # loads (on-the-fly quantization loads synchronously); a Conv1D's is transposed first.
            shape = (shell.in_features, shell.out_features) if conv1d else (shell.out_features, shell.in_features)
            weight = torch.empty(shape, dtype=dtype, device=device).normal_(0.0, std)
            shell.weight = (_int8 if int8 else _nf4)(cfg, weight.T if conv1d else weight, shell)
            del weight
        else:
            _materialize(module, device, only=leaf)
    quantized = {id(shell) for shell, _ in shells.values()}
    for module in model.modules():
        _materialize(module, device)  # what no checkpoint holds (non-persistent buffers), after the load
    for module in model.modules():
        if id(module) in quantized:
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif any(id(m) in quantized for m in module.modules()):
            # transformers' initialisation of a block reaches into its layers (GPT-2's scaled c_proj), now 4-bit.
            for p in module.parameters(recurse=False):
                nn.init.normal_(p, 0.0, std)
        else:
            model._init_weights(module)  # transformers' own values (norms at one, rotary frequencies)
    model.tie_weights()
    # What from_pretrained sets, and what prepare_model_for_kbit_training reads.
    setattr(model, "is_loaded_in_8bit" if int8 else "is_loaded_in_4bit", True)
    return prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)


def _load_order(model: nn.Module) -> list[str]:
    """The names from_pretrained loads, in its order: the state dict's parameters (a tied one once) and persistent
    buffers, sorted by transformers' own key (`dot_natural_key`: layer 2 before layer 10)."""
    names = [name for name, _ in model.named_parameters()]
    for prefix, module in model.named_modules():
        names += [
            f"{prefix}.{name}" if prefix else name
            for name, b in module._buffers.items()
            if b is not None and name not in module._non_persistent_buffers_set
        ]
    try:
        from transformers.core_model_loading import dot_natural_key
    except ImportError:  # a transformers without it loads in the checkpoint's order, which this keeps
        return names
    return sorted(names, key=dot_natural_key)


# transformers' caching_allocator_warmup leaves this much of the card unreserved.
WARMUP_HEADROOM = 1.2 * 1024**3


def _warm_up(model: nn.Module, order: list[str], shells: dict, quantized_size: float, device: torch.device) -> None:
    """transformers' caching_allocator_warmup, which from_pretrained calls before it loads a tensor onto a GPU: one
    fp16 tensor of the model's loaded size (a weight to be quantized at its quantized size), allocated and freed,
    so the caching allocator keeps one segment that the load then fills."""
    if not _onto_gpu(device):
        return
    tensors = dict(model.named_parameters())
    tensors.update(model.named_buffers())
    count = 0
    for key in order:
        owner, _, leaf = key.rpartition(".")
        t = tensors[key]
        count += t.numel() * (quantized_size if owner in shells and leaf == "weight" else t.element_size())
    unused, total = _cached_free(device)
    if count - unused > unused:
        count -= unused
    elif count - unused > 1.5 * 1024**3:
        count = unused + 1
    else:
        count = 0
    if total is not None:
        count = min(count, total - WARMUP_HEADROOM)
    if count > 0:
        torch.empty(int(count // 2), dtype=torch.float16, device=device)


def _onto_gpu(device: torch.device) -> bool:
    """Whether the model loads onto a GPU (where from_pretrained warms the allocator up). A CUDA estimate, replayed on
    fake CPU tensors, answers yes (experiments/estimate/bnb_quirks.py, quirk 14)."""
    return device.type == "cuda"


def _cached_free(device: torch.device) -> tuple[int, int | None]:
    """Reserved but unallocated bytes, and the card's total, of a real device; in a replay, the warm-up's free bytes
    (its allocator starts where the engine's warm-up leaves a real one) and None: the card is chosen after."""
    from torch._guards import detect_fake_mode

    if device.type != "cuda":
        return 0, None
    if detect_fake_mode() is not None:
        return warm_up_layout.free_bytes(), None  # the replay's allocator starts as the warm-up leaves a real one
    if not torch.cuda.is_available():
        return 0, None
    return (
        torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device),
        torch.cuda.mem_get_info(device)[1],
    )


def _nf4_shell(cfg: ExperimentConfig, in_features: int, out_features: int, bias: bool) -> nn.Module:
    import bitsandbytes as bnb

    return bnb.nn.Linear4bit(
        in_features,
        out_features,
        bias=bias,
        compute_dtype=compute_dtype(cfg),
        compress_statistics=cfg.double_quant,
        quant_type=cfg.quant_type,
        quant_storage=torch.uint8,
        device="meta",
    )


def _int8_shell(cfg: ExperimentConfig, in_features: int, out_features: int, bias: bool) -> nn.Module:
    import bitsandbytes as bnb

    return bnb.nn.Linear8bitLt(
        in_features, out_features, bias=bias, has_fp16_weights=False, threshold=INT8_THRESHOLD, device="meta"
    )


def _nf4(cfg: ExperimentConfig, weight: torch.Tensor, shell: nn.Module) -> nn.Parameter:
    """`weight` in 4 bits for `shell` (a Linear4bit): bitsandbytes' quantize_4bit of its contiguous copy, as
    Params4bit's own quantization makes it."""
    import bitsandbytes as bnb
    import bitsandbytes.functional as F

    packed, state = F.quantize_4bit(
        weight.contiguous(), blocksize=BLOCKSIZE, compress_statistics=cfg.double_quant, quant_type=cfg.quant_type
    )
    return bnb.nn.modules.Params4bit(  # the module's own name: the one Linear4bit's constructor calls
        packed,
        requires_grad=False,
        quant_state=state,
        blocksize=BLOCKSIZE,
        compress_statistics=cfg.double_quant,
        quant_type=cfg.quant_type,
        quant_storage=torch.uint8,
        module=shell,
        bnb_quantized=True,
    )


def _int8(cfg: ExperimentConfig, weight: torch.Tensor, shell: nn.Module) -> nn.Parameter:
    """`weight` in int8 with a scale per row, as Int8Params quantizes it (through fp16); the shell (a Linear8bitLt)
    has LLM.int8's outlier threshold as transformers' BitsAndBytesConfig sets it (6.0)."""
    import bitsandbytes as bnb
    import bitsandbytes.functional as F

    half = weight.contiguous().to(dtype=torch.float16)
    rows, scales, _ = F.int8_vectorwise_quant(half)
    del half
    return bnb.nn.modules.Int8Params(rows, requires_grad=False, has_fp16_weights=False, CB=rows, SCB=scales)


def _materialize(module: nn.Module, device: torch.device, only: str | None = None) -> None:
    """`module.to_empty(device, recurse=False)` spelt out (of the tensor `only`, where given): a meta parameter
    becomes a new one on the device (the path nn.Module._apply takes for it), a meta buffer a new tensor."""
    for name, p in module._parameters.items():
        if only not in (None, name):
            continue
        if p is not None and p.device.type == "meta":
            module._parameters[name] = nn.Parameter(torch.empty_like(p, device=device), requires_grad=p.requires_grad)
    for name, b in module._buffers.items():
        if only not in (None, name):
            continue
        if b is not None and b.device.type == "meta":
            module._buffers[name] = torch.empty_like(b, device=device)
