"""The model spec: how a model enters the engine. The three built-in families (experiments/training/models.py) and
models of one's own (experiments/training/source_models.py) are specs; the one setup recipe takes any."""

from __future__ import annotations

import torch
from torch import nn

from ..core.config import ExperimentConfig


class ModelSpec:
    """How a model enters the engine: everything the one setup recipe (experiments/training/step.py) and the one
    training step need from it, for a configuration. A spec

    - builds the module on a device, directly in its parameters' dtype (no copy from the CPU or from fp32 first:
      the model phase shows the parameters only, and the fake-tensor replay sees the same allocations);
    - enables activation checkpointing on it;
    - makes the batch: a dict of named inputs (the model's keyword arguments) and a dict of targets, both of the
      whole batch, from their own generator seed (micro-batches are views of them);
    - computes the loss of a micro-batch (forward included), under whatever autocast the step has entered;
    - names the repeated blocks (FSDP2 shards each one, so only one block's parameters are whole at a time).
    """

    def build(self, cfg: ExperimentConfig, device: torch.device) -> nn.Module:
        raise NotImplementedError

    def enable_checkpointing(self, model: nn.Module, cfg: ExperimentConfig) -> None:
        raise NotImplementedError

    def batch(self, cfg: ExperimentConfig, device: torch.device, seed: int) -> tuple[dict, dict]:
        raise NotImplementedError

    def loss(self, cfg: ExperimentConfig, model: nn.Module, inputs: dict, targets: dict) -> torch.Tensor:
        raise NotImplementedError

    def blocks(self, model: nn.Module) -> list[nn.Module]:
        raise NotImplementedError
