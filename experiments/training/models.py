"""The sandbox's three built-in families behind the model spec (experiments/training/model_spec.py), with activation
checkpointing built into their forward."""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..core.config import ExperimentConfig
from ..core.families import CNN_CLASSES, cnn_pools
from .model_spec import ModelSpec


class MLPBlock(nn.Module):
    """One layer of the syllabus's LargeModel: Linear(width, width) then ReLU."""

    def __init__(self, width: int, inplace: bool):
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.inplace = inplace

    def forward(self, x):
        return F.relu(self.linear(x), inplace=self.inplace)


class ConvBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, pool: bool, inplace: bool):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, kernel_size=3, padding=1)
        self.pool = pool
        self.inplace = inplace

    def forward(self, x):
        x = F.relu(self.conv(x), inplace=self.inplace)
        return F.max_pool2d(x, 2) if self.pool else x


class TransformerBlock(nn.Module):
    """A GPT-style pre-norm block: causal self-attention (SDPA) and a 4x GELU MLP."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def _run_blocks(blocks, x):
    for block in blocks:
        x = block(x)
    return x


class Net(nn.Module):
    """`blocks` is the part that checkpointing applies to (none until the spec enables it); `head` (may be empty)
    runs after it."""

    def __init__(self, blocks: list[nn.Module], head: nn.Module):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.head = head
        self.checkpoint_mode = "none"
        self.segment_size = 1
        self.every = 1  # per_layer: every n-th block, the others keep their activations

    def forward(self, x):
        if self.checkpoint_mode == "none":
            x = _run_blocks(self.blocks, x)
        elif self.checkpoint_mode == "per_layer":
            for i, block in enumerate(self.blocks):
                # The module itself is passed, so recomputation uses this very layer.
                x = checkpoint(block, x, use_reentrant=False) if i % self.every == 0 else block(x)
        else:
            n = self.segment_size
            for start in range(0, len(self.blocks), n):
                # partial binds this segment's layers now; a closure over a loop variable
                # would be evaluated in backward and recompute the wrong layers.
                segment = functools.partial(_run_blocks, self.blocks[start : start + n])
                x = checkpoint(segment, x, use_reentrant=False)
        return self.head(x)


class _FamilySpec(ModelSpec):
    """A built-in family: a stack of blocks and a head in one Net, one input "x" and one target "y"."""

    def build(self, cfg: ExperimentConfig, device: torch.device) -> Net:
        # Built directly on the device, as `nn.Linear(..., device="cuda")` would be. Pure bf16 weights are created
        # in bf16, as `nn.Linear(..., dtype=torch.bfloat16)` would make them.
        old_dtype = torch.get_default_dtype()
        if cfg.precision == "bf16":
            torch.set_default_dtype(torch.bfloat16)
        try:
            with torch.device(device):
                blocks, head = self.modules(cfg)
                return Net(blocks, head)
        finally:
            torch.set_default_dtype(old_dtype)

    def modules(self, cfg: ExperimentConfig) -> tuple[list[nn.Module], nn.Module]:
        raise NotImplementedError

    def enable_checkpointing(self, model: Net, cfg: ExperimentConfig) -> None:
        model.checkpoint_mode, model.segment_size, model.every = cfg.checkpoint, cfg.segment_size, cfg.checkpoint_every

    def input_shape(self, cfg: ExperimentConfig) -> tuple[int, ...]:
        raise NotImplementedError

    def batch(self, cfg: ExperimentConfig, device: torch.device, seed: int) -> tuple[dict, dict]:
        gen = torch.Generator(device="cpu").manual_seed(seed)
        dtype = torch.bfloat16 if cfg.precision == "bf16" else torch.float32
        shape = self.input_shape(cfg)
        # Generated on the CPU so every device (and the baseline of the correctness guard) sees the same numbers
        # for the same seed.
        x = torch.randn(shape, generator=gen).to(device=device, dtype=dtype)
        return {"x": x}, {"y": self.target(cfg, gen, shape, device, dtype)}

    def target(self, cfg, gen, shape, device, dtype) -> torch.Tensor:
        return torch.randn(shape, generator=gen).to(device=device, dtype=dtype)

    def loss(self, cfg: ExperimentConfig, model: nn.Module, inputs: dict, targets: dict) -> torch.Tensor:
        return F.mse_loss(model(**inputs), targets["y"])

    def blocks(self, model: Net) -> list[nn.Module]:
        return list(model.blocks)


class MLPSpec(_FamilySpec):
    def modules(self, cfg):
        return [MLPBlock(cfg.width, cfg.inplace) for _ in range(cfg.layers)], nn.Identity()

    def input_shape(self, cfg):
        return (cfg.batch, cfg.width)


class CNNSpec(_FamilySpec):
    def modules(self, cfg):
        blocks, c_in = [], 3
        for i in range(cfg.layers):
            blocks.append(ConvBlock(c_in, cfg.width, pool=cnn_pools(cfg.image_size, i), inplace=cfg.inplace))
            c_in = cfg.width
        return blocks, nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cfg.width, CNN_CLASSES))

    def input_shape(self, cfg):
        return (cfg.batch, 3, cfg.image_size, cfg.image_size)

    def target(self, cfg, gen, shape, device, dtype):
        return torch.randint(0, CNN_CLASSES, (cfg.batch,), generator=gen).to(device)

    def loss(self, cfg, model, inputs, targets):
        return F.cross_entropy(model(**inputs), targets["y"])


class TransformerSpec(_FamilySpec):
    def modules(self, cfg):
        return [TransformerBlock(cfg.width, cfg.heads) for _ in range(cfg.layers)], nn.LayerNorm(cfg.width)

    def input_shape(self, cfg):
        return (cfg.batch, cfg.seq_len, cfg.width)


BUILTIN_SPECS: dict[str, ModelSpec] = {"mlp": MLPSpec(), "cnn": CNNSpec(), "transformer": TransformerSpec()}


def spec_for(cfg: ExperimentConfig) -> ModelSpec:
    """The model spec of a configuration: its model_source's (a model of one's own), else its built-in family."""
    if cfg.model_source:
        from .source_models import spec_of

        return spec_of(cfg)
    return BUILTIN_SPECS[cfg.model]


def build_model(cfg: ExperimentConfig, device: torch.device, spec: ModelSpec | None = None) -> nn.Module:
    """cfg's model on `device`, checkpointing enabled as cfg asks (what the model phase of a run builds)."""
    spec = spec or spec_for(cfg)
    if cfg.finetune in ("qlora", "int8"):
        from .quantized import build_quantized

        model = build_quantized(spec, cfg, device)
    else:
        model = spec.build(cfg, device)
    spec.enable_checkpointing(model, cfg)
    if cfg.finetune != "full":
        from .finetune import apply_lora

        model = apply_lora(model, cfg)
    return model


def seed_lambda_forward(self: Net, x):
    """The syllabus's exercise-2 answer, kept to show that it is wrong.

    The lambda reads `layer` when backward recomputes it, i.e. after the loop has finished, so
    every segment is recomputed with the LAST layer. No error is raised; the gradients are wrong.
    """
    for layer in self.blocks:
        x = checkpoint(lambda x: torch.relu(layer.linear(x)), x, use_reentrant=False)  # noqa: B023
    return self.head(x)
