"""One training step, written once and used both instrumented (phase by phase) and bare (timing)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from ..core.config import ExperimentConfig
from .models import build_model, loss_fn, make_batch
from .strategies import autocast, make_optimizer, make_scaler


@dataclass
class TrainState:
    cfg: ExperimentConfig
    device: torch.device
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler | None
    inputs: torch.Tensor
    targets: torch.Tensor


def build_state(cfg: ExperimentConfig, device: torch.device) -> TrainState:
    """Model, optimizer, scaler and batch from the config's seed: what the runner builds phase by phase."""
    torch.manual_seed(cfg.seed)
    model = build_model(cfg, device)
    optimizer = make_optimizer(cfg, model.parameters())
    inputs, targets = make_batch(cfg, device, cfg.seed + 1)
    return TrainState(cfg, device, model, optimizer, make_scaler(cfg, device), inputs, targets)


def _no_phase(name: str, step: int, micro: int | None = None):
    return contextlib.nullcontext()


def train_step(s: TrainState, step: int = 0, phase=_no_phase) -> torch.Tensor:
    """Zero grads, forward/backward per micro-batch, optimizer step. Returns the summed loss (detached).

    `phase(name, step, micro)` is a context manager the measurement wraps around each phase;
    the default does nothing, so the timed steps run exactly this code with no instrumentation.
    """
    cfg = s.cfg
    with phase("zero_grad", step):
        s.optimizer.zero_grad(set_to_none=cfg.zero_grad_to_none)
    total = None
    mb = cfg.micro_batch
    for micro in range(cfg.accum):
        micro_tag = micro if cfg.accum > 1 else None
        x = s.inputs[micro * mb : (micro + 1) * mb]
        y = s.targets[micro * mb : (micro + 1) * mb]
        with phase("forward", step, micro_tag):
            with autocast(cfg, s.device):
                loss = loss_fn(cfg, s.model(x), y)
            if cfg.accum > 1:
                loss = loss / cfg.accum
            # No Python name holds the output: autograd frees it as soon as backward is past it.
        with phase("backward", step, micro_tag):
            (s.scaler.scale(loss) if s.scaler else loss).backward()
            # mse_loss's 0-dim result keeps the (batch, width) storage it was allocated with (a resize_
            # to 0-dim never shrinks a storage); a clone keeps one element instead of pinning that
            # buffer through the optimizer step.
            loss = loss.detach().clone()
        total = loss if total is None else total + loss
    with phase("optimizer_step", step):
        if s.scaler:
            s.scaler.step(s.optimizer)
            s.scaler.update()
        else:
            s.optimizer.step()
    return total
