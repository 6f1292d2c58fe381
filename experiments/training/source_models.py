"""Models of the learner's own behind the same model spec as the built-in families (experiments/training/models.py):
a preset or a Hugging Face `model_type` with overrides (experiments/core/model_sources.py), a torchvision model where
torchvision imports, and, from the command line only, an import path `package.module:factory` with an input spec
and a loss. The one setup recipe builds, batches and trains them as it does the families."""

from __future__ import annotations

import functools
import importlib
import inspect
import re
import subprocess
import sys

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..core.config import ExperimentConfig
from ..core.errors import ConfigError
from ..core.model_sources import (
    IMPORT_PATH,
    LOSSES,
    TEXT_TASKS,
    parse_overrides,
    parse_source,
    preset_config,
    presets,
)
from . import hf_models
from .model_spec import ModelSpec

INPUT_DTYPES = {"int64": torch.int64, "int32": torch.int32, "bool": torch.bool, "float": None}
_INPUT = re.compile(r"^(?P<name>[A-Za-z_]\w*):(?P<dtype>\w+)\[(?P<dims>[^\]]*)\](?:<(?P<high>\d+))?$")


def _refused(field: str, detail: str) -> ConfigError:
    return ConfigError(field, detail, "model_spec", detail=detail)


class SourceSpec(ModelSpec):
    """A model of one's own. `kind`: hf | torchvision | import; `config`: the built Hugging Face config."""

    def __init__(self, kind: str, name: str, task: str, config=None, inputs=(), targets=(), loss: str = "model"):
        self.kind, self.name, self.task, self.config = kind, name, task, config
        self.inputs, self.targets, self.loss_kind = tuple(inputs), tuple(targets), loss
        self.attn = self.experts = None

    @property
    def is_text(self) -> bool:
        return self.task in TEXT_TASKS

    @property
    def is_image(self) -> bool:
        return self.task == "image_classification"

    def describe(self) -> str:
        return f"{self.kind}:{self.name}"

    def check(self, cfg: ExperimentConfig) -> None:
        """The levers this model allows (its positions, its image size), one line each."""
        lim = hf_models.limits(self.config) if self.kind == "hf" else {}
        if self.is_text and lim.get("seq_len") and cfg.seq_len > lim["seq_len"]:
            raise _refused("seq_len", f"got {cfg.seq_len}; this model has {lim['seq_len']} positions (max_positions)")
        if self.is_image and lim.get("image_size") and cfg.image_size != lim["image_size"]:
            raise _refused("image_size", f"got {cfg.image_size}; this config was built for {lim['image_size']}")

    def build(self, cfg: ExperimentConfig, device: torch.device) -> nn.Module:
        self.check(cfg)
        dtype = torch.bfloat16 if cfg.precision == "bf16" else torch.float32
        old = torch.get_default_dtype()
        torch.set_default_dtype(dtype)
        try:
            # Built directly on the device in the parameters' dtype, as `from_config(..., dtype=...)` on a device
            # context does: the model phase shows the parameters only.
            with torch.device(device):
                if self.kind == "hf":
                    model = hf_models.build(self.name, self.task, self.config, dtype, self.attn, self.experts)
                elif self.kind == "torchvision":
                    import torchvision

                    model = torchvision.models.get_model(self.name, weights=None, num_classes=self.config)
                else:
                    factory = _factory(self.name)
                    try:
                        model = factory()
                    except TypeError as e:  # a callable that is no factory of a model (os:system), or one that needs
                        # arguments: the learner's to fix, in one line
                        raise _refused("import", f"{self.name}() raised TypeError: {e}") from None
                    if not isinstance(model, nn.Module):
                        raise _refused("import", f"{self.name} returned {type(model).__name__}, not an nn.Module")
        finally:
            torch.set_default_dtype(old)
        return model.train()

    def enable_checkpointing(self, model: nn.Module, cfg: ExperimentConfig) -> None:
        every = cfg.checkpoint_every
        if cfg.checkpoint == "none" or (self.kind == "hf" and hf_models.enable_checkpointing(model, every)):
            return
        found = largest_block_list(model)
        if found is None:
            raise _refused("checkpoint", f"{self.describe()} has no list of blocks to checkpoint")
        blocks = found[1]
        for i in range(0, len(blocks), every):
            blocks[i] = Checkpointed(blocks[i])

    def batch(self, cfg: ExperimentConfig, device: torch.device, seed: int) -> tuple[dict, dict]:
        # Made on the CPU from the seed (every device sees the same numbers), then moved.
        gen = torch.Generator(device="cpu").manual_seed(seed)
        fdtype = torch.bfloat16 if cfg.precision == "bf16" else torch.float32
        if self.kind == "hf" and self.is_text:
            ids = torch.randint(0, hf_models.vocab_size(self.config), (cfg.batch, cfg.seq_len), generator=gen)
            if self.task == "sequence_classification":
                return {"input_ids": ids.to(device)}, {"labels": _class_labels(self.config, cfg.batch, gen).to(device)}
            # A causal LM shifts its labels itself, an encoder-decoder shifts them into the decoder's inputs (a target
            # as long as the source); a masked LM is scored on every position.
            return {"input_ids": ids.to(device)}, {"labels": ids.to(device)}
        if self.kind != "import":
            n = hf_models.classes(self.config) if self.kind == "hf" else self.config
            x = torch.randn((cfg.batch, 3, cfg.image_size, cfg.image_size), generator=gen).to(device, fdtype)
            y = torch.randint(0, n, (cfg.batch,), generator=gen).to(device)
            return ({"pixel_values": x} if self.kind == "hf" else {"x": x}), {"labels": y}
        return _make(self.inputs, cfg, device, fdtype, gen), _make(self.targets, cfg, device, fdtype, gen)

    def loss(self, cfg: ExperimentConfig, model: nn.Module, inputs: dict, targets: dict) -> torch.Tensor:
        # From the expression: no Python name holds the model's output through backward.
        if self.kind == "torchvision":
            return F.cross_entropy(model(inputs["x"]), targets["labels"])
        if self.loss_kind == "model":
            return _loss_of(call(model, inputs, **targets))
        if self.loss_kind == "mean":
            return _logits(call(model, inputs)).mean()
        (target,) = targets.values()
        if self.loss_kind == "ce":
            return F.cross_entropy(_logits(call(model, inputs)).flatten(0, -2), target.flatten())
        return F.mse_loss(_logits(call(model, inputs)), target)

    def blocks(self, model: nn.Module) -> list[nn.Module]:
        """What FSDP2 shards one by one: the modules of transformers' _no_split_modules that sit in a block list
        (not BERT's embeddings, tied to the MLM head outside them), else the largest block list."""
        names = set(getattr(model, "_no_split_modules", None) or ())
        if names:
            listed = {id(c) for m in model.modules() if isinstance(m, (nn.ModuleList, nn.Sequential)) for c in m}
            found = [m for m in model.modules() if type(m).__name__ in names and id(m) in listed]
            if found:
                return found
        best = largest_block_list(model)
        return list(best[1]) if best else []


class Checkpointed(nn.Module):
    """One block recomputed in backward (non-reentrant); the block itself is passed, so recomputation uses it."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.block = block

    def forward(self, *args, **kwargs):
        return checkpoint(self.block, *args, use_reentrant=False, **kwargs)


def largest_block_list(model: nn.Module) -> tuple[str, nn.Module] | None:
    """The ModuleList or Sequential with the most children (then parameters): a network's repeated blocks."""
    best, key = None, None
    for name, m in model.named_modules():
        if isinstance(m, (nn.ModuleList, nn.Sequential)) and len(m) >= 2:
            k = (len(m), sum(p.numel() for p in m.parameters()))
            if key is None or k > key:
                best, key = (name, m), k
    return best


@functools.lru_cache(maxsize=32)
def source_spec(source: str, overrides: str = "") -> SourceSpec:
    """The spec of a configuration's model_source (names and numbers only), validated; cached per source."""
    kind, name, size = parse_source(source)
    extra = parse_overrides(overrides)
    if kind == "torchvision":
        ok, why = torchvision_status()
        if not ok:
            raise _refused("model_source", why)
        return SourceSpec("torchvision", name, "image_classification", config=extra.get("classes", 1000), loss="ce")
    base, task = {}, (size if kind == "hf" else None)
    if kind == "preset":
        src = presets()[name]["source"]
        base, _defaults = preset_config(name, size == "tiny")
        name, task = src["model_type"], src.get("task")
    task = hf_models.check_model_type(name, task)
    config = hf_models.check_shape(name, hf_models.config_kwargs(name, base, extra), extra)
    return SourceSpec("hf", name, task, config=hf_models.for_task(config, task))


def spec_of(cfg: ExperimentConfig) -> SourceSpec:
    spec = source_spec(cfg.model_source, cfg.model_overrides)
    spec.check(cfg)
    return spec


# ---------------------------------------------------------------- torchvision


@functools.lru_cache(maxsize=1)
def torchvision_status() -> tuple[bool, str]:
    """(importable, its version or what to install), checked once per process, in a child process: a torchvision
    built for another torch fails half-way through its import ("operator torchvision::nms does not exist") and
    would leave this process with half-registered operators."""
    return check_torchvision()


def check_torchvision(env: dict | None = None) -> tuple[bool, str]:
    code = "import torchvision, sys; sys.stdout.write(torchvision.__version__)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    if r.returncode == 0:
        return True, r.stdout.strip()
    err = (r.stderr.strip().splitlines() or ["unknown error"])[-1]
    if "No module named 'torchvision'" in err:
        return False, (
            f"torchvision is not installed; install the torchvision release built for torch {torch.__version__} "
            "from the same index as torch"
        )
    return False, (
        f"torchvision is installed but does not import beside torch {torch.__version__} ({err[:200]}): its wheel is "
        "built for another torch. Install a matching pair from one index, e.g. both from "
        "https://download.pytorch.org/whl/cpu"
    )


# ---------------------------------------------------------------- an import path (the command line only)


def parse_inputs(text: str, field: str = "inputs") -> tuple[tuple, ...]:
    """`input_ids:int64[B,S]<128256 pixel_values:float[B,3,I,I]` -> (name, dtype, dims, high) each. Dim 0 is the
    batch; B, S and I stand for batch, seq_len and image_size; `float` follows the precision."""
    items = [t for t in re.split(r"[;\s]+", (text or "").strip()) if t]
    if not items:
        raise _refused(field, "empty; expected e.g. input_ids:int64[B,S]<128256")
    out = []
    for item in items:
        m = _INPUT.match(item)
        if not m or m["dtype"] not in INPUT_DTYPES:
            raise _refused(field, f"{item!r} is not name:dtype[dims]<high with dtype one of {', '.join(INPUT_DTYPES)}")
        dims = []
        for d in (x.strip() for x in m["dims"].split(",")):
            if d in ("B", "S", "I") or (d.isdigit() and 1 <= int(d) <= 1_048_576):
                dims.append(d if d in ("B", "S", "I") else int(d))
            else:
                raise _refused(field, f"{item}: dimension {d!r}; allowed: an integer in [1, 1048576], or B, S, I")
        is_int = m["dtype"] in ("int64", "int32")
        if is_int != bool(m["high"]):
            raise _refused(field, f"{item}: integer inputs, and only they, take an upper bound, e.g. <128256")
        out.append((m["name"], m["dtype"], tuple(dims), int(m["high"]) if m["high"] else None))
    return tuple(out)


def import_spec(path: str, inputs: str, targets: str = "", loss: str = "mean") -> SourceSpec:
    if not IMPORT_PATH.fullmatch(path or ""):
        raise _refused("import", f"{path!r} is not package.module:factory")
    if loss not in LOSSES:
        raise _refused("loss", f"got {loss!r}; allowed: {', '.join(LOSSES)}")
    ins = parse_inputs(inputs)
    outs = parse_inputs(targets, "targets") if (targets or "").strip() else ()
    if loss in ("ce", "mse") and len(outs) != 1:
        raise _refused("targets", f"loss {loss} needs exactly one target, e.g. labels:int64[B]<1000")
    _factory(path)  # fail now, with the field named, rather than in the middle of a replay
    return SourceSpec("import", path, "custom", inputs=ins, targets=outs, loss=loss)


def _factory(path: str):
    module_name, attr = path.split(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # noqa: BLE001 - any import failure is the learner's to fix: say which and why
        raise _refused("import", f"cannot import {module_name}: {type(e).__name__}: {e}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise _refused("import", f"{module_name} has no callable {attr!r}")
    return factory


def _make(specs, cfg, device, fdtype, gen) -> dict:
    sizes = {"B": cfg.batch, "S": cfg.seq_len, "I": cfg.image_size}
    out = {}
    for name, dtype, dims, high in specs:
        shape = (cfg.batch, *(sizes[d] if isinstance(d, str) else d for d in dims[1:]))
        dt = INPUT_DTYPES[dtype] or fdtype
        if high:
            t = torch.randint(0, high, shape, generator=gen, dtype=dt)
        else:
            t = torch.ones(shape, dtype=dt) if dt is torch.bool else torch.randn(shape, generator=gen).to(dt)
        out[name] = t.to(device)
    return out


def _class_labels(config, batch: int, gen: torch.Generator) -> torch.Tensor:
    """One label per sequence: a class index, or a float target where the head has one output (transformers then
    trains it as a regression with MSE)."""
    n = hf_models.classes(config)
    if n == 1:
        return torch.randn((batch,), generator=gen)
    return torch.randint(0, n, (batch,), generator=gen)


def _logits(out):
    if isinstance(out, torch.Tensor):
        return out
    logits = getattr(out, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    if isinstance(out, dict):
        return next(v for v in out.values() if isinstance(v, torch.Tensor))
    return out[0]


def _loss_of(out):
    loss = out if isinstance(out, torch.Tensor) else getattr(out, "loss", None)
    if loss is None and isinstance(out, dict):
        loss = out.get("loss")
    if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
        raise _refused("loss", "the model returned no scalar loss; give targets it takes, or choose ce, mse or mean")
    return loss


def call(model: nn.Module, inputs: dict, **extra):
    """Keyword arguments when the forward names them, else positional in the spec's order (nn.Sequential)."""
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        params = {}
    if any(p.kind is p.VAR_KEYWORD for p in params.values()) or set(inputs) | set(extra) <= set(params):
        return model(**inputs, **extra)
    return model(*inputs.values(), *extra.values())
