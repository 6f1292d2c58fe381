"""The one setup recipe and the one training step, used by every run: measured phase by phase (experiments/measure/
run.py), replayed on fake tensors (experiments/estimate/replay.py), timed (experiments/measure/timing.py), profiled,
checked for its gradients (experiments/training/guard.py) and run on one rank of a data-parallel job
(experiments/distributed/rank.py).

Setup: the model (built by its spec, experiments/training/models.py), then, on a rank, its wrap (DDP, ZeRO-1,
FSDP2), the optimizer and the gradient scaler, then the batch; each in its phase when a recorder is given. A run
that differs from one device's says how in a `Setup` (a rank's wrap, optimizer and slice of the batch; the replay's
scaler), never with a recipe of its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..core.config import ExperimentConfig
from ..core.finetune import check_installed
from ..core.vocabulary import WRAP_PHASE
from .finetune import load_libraries, offload_context
from .models import ModelSpec, build_model, spec_for
from .strategies import autocast, make_optimizer, make_scaler


@dataclass
class TrainState:
    """What the steps train, filled in by `setup`. `inputs` and `targets` are dicts of whole-batch tensors (the
    model's keyword arguments and the loss's targets); each micro-batch is a slice of every one of them."""

    cfg: ExperimentConfig
    device: torch.device
    spec: ModelSpec | None = None
    model: torch.nn.Module | None = None
    optimizer: torch.optim.Optimizer | None = None
    scaler: torch.amp.GradScaler | None = None
    inputs: dict | None = None
    targets: dict | None = None
    # A replay runs only this many of each step's micro-batches (the ones after repeat them: estimate/micro_batches.py).
    micro_batches: int | None = None

    def clear(self) -> None:
        """Drops every tensor this state holds (after a finish, an out-of-memory error or a cancel)."""
        self.model = self.optimizer = self.scaler = self.inputs = self.targets = None


@dataclass(frozen=True)
class Setup:
    """How a run's setup differs from a single device's. `wrap(model)`: the model a rank trains (in a "wrap" phase
    of its own); `optimizer(cfg, model)`: its optimizer; `batch()`: (inputs, targets) on the device (a rank's
    slice); `scaler(grad_scaler)`: what the steps scale with (the replay's scaler that never skips)."""

    wrap: Callable | None = None
    optimizer: Callable | None = None
    batch: Callable | None = None
    scaler: Callable | None = None


def _no_phase(name: str, step: int, micro: int | None = None):
    return contextlib.nullcontext()


SINGLE_DEVICE = Setup()


def setup(state: TrainState, phase=_no_phase, tracker=None, how: Setup = SINGLE_DEVICE) -> TrainState:
    """Model, [wrap,] optimizer and scaler, batch: from the config's seed, each in its phase.
    `tracker`: told which tensors are the parameters (their autocast copies are a category of their own)."""
    cfg, device = state.cfg, state.device
    check_installed(cfg)
    state.spec = state.spec or spec_for(cfg)
    torch.manual_seed(cfg.seed)
    with phase("model", 0):
        state.model = build_model(cfg, device, state.spec)
    if tracker is not None:
        tracker.set_parameters(state.model.parameters())
    if how.wrap is not None:
        with phase(WRAP_PHASE, 0):
            state.model = how.wrap(state.model)
        if tracker is not None:
            tracker.set_parameters(state.model.parameters(), wrapped=True)
    with phase("optimizer", 0):
        state.optimizer = (
            how.optimizer(cfg, state.model) if how.optimizer else make_optimizer(cfg, state.model.parameters())
        )
        state.scaler = make_scaler(cfg, device)
        if how.scaler is not None and state.scaler is not None:
            state.scaler = how.scaler(state.scaler)
    with phase("data", 0):
        state.inputs, state.targets = how.batch() if how.batch else state.spec.batch(cfg, device, cfg.seed + 1)
    return state


def build_state(cfg: ExperimentConfig, device: torch.device, how: Setup = SINGLE_DEVICE) -> TrainState:
    """The setup with no phases and nothing watching: what timing, profiling and the gradient checks train."""
    return setup(TrainState(cfg, device), how=how)


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
    for micro in range(min(cfg.accum, s.micro_batches or cfg.accum)):
        micro_tag = micro if cfg.accum > 1 else None
        inputs = {k: v[micro * mb : (micro + 1) * mb] for k, v in s.inputs.items()}
        targets = {k: v[micro * mb : (micro + 1) * mb] for k, v in s.targets.items()}
        with phase("forward", step, micro_tag):
            with autocast(cfg, s.device), offload_context(cfg, s.device):
                loss = s.spec.loss(cfg, s.model, inputs, targets)
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


def train(state: TrainState, rec, tracker, how: Setup = SINGLE_DEVICE, on_loss: Callable | None = None) -> TrainState:
    """The measured part of a run: setup, then cfg.steps steps, every phase wrapped by the recorder `rec`, every
    tensor seen by `tracker`. `on_loss(loss)`: each step's summed loss (a replay has no values to read)."""
    rec.state = state
    load_libraries(state.cfg, state.device)  # before the tracker: their import-time tensors are no part of any phase
    with tracker:
        setup(state, rec, tracker, how)
        for step in range(1, state.cfg.steps + 1):
            loss = train_step(state, step, rec)
            if on_loss is not None:
                on_loss(loss)
            del loss
    return state
