"""Small models for the import-path source (`own_model_toys:NAME`, the command line's --import): one that replays, and
one for each kind of thing fake tensors cannot replay."""

from __future__ import annotations

import torch
from torch import nn


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(32, 32), nn.GELU()) for _ in range(4))
        self.head = nn.Linear(32, 10)

    def body(self, x):
        for block in self.blocks:
            x = block(x)
        return x

    def forward(self, x):
        return self.head(self.body(x))


def mlp() -> nn.Module:
    """x: float[B, 32] -> logits [B, 10]."""
    return _Net()


class _ReadsValue(_Net):
    def forward(self, x):
        h = self.body(x)
        if h.mean().item() > 0:  # which branch runs depends on the numbers
            h = h * 2
        return self.head(h)


def reads_value() -> nn.Module:
    return _ReadsValue()


class _Gate(nn.Module):
    def forward(self, h):
        return h[h.sum(-1) > 0]  # the kept rows depend on the data


class _DataDependentShape(_Net):
    def __init__(self):
        super().__init__()
        self.gate = _Gate()

    def forward(self, x):
        return self.head(self.gate(self.body(x)))


def data_dependent_shape() -> nn.Module:
    return _DataDependentShape()


@torch.library.custom_op("own_model_toys::scaled", mutates_args=())
def scaled(x: torch.Tensor) -> torch.Tensor:
    """A custom op with no fake kernel registered."""
    return x * 2


class _CustomOp(_Net):
    def forward(self, x):
        return self.head(scaled(self.body(x)))


def custom_op() -> nn.Module:
    return _CustomOp()


def not_a_module():
    return "nope"


class _Recurrent(nn.Module):
    def __init__(self, cell: type[nn.RNNBase], bidirectional: bool = False):
        super().__init__()
        self.rnn = cell(32, 48, num_layers=2, batch_first=True, bidirectional=bidirectional)
        self.head = nn.Linear(48 * (2 if bidirectional else 1), 10)

    def forward(self, x):
        return self.head(self.rnn(x)[0][:, -1])


def lstm() -> nn.Module:
    """x: float[B, 12, 32] -> logits [B, 10]: two LSTM layers (oneDNN's LSTM on the CPU, with its workspace)."""
    return _Recurrent(nn.LSTM)


def bilstm() -> nn.Module:
    return _Recurrent(nn.LSTM, bidirectional=True)


def gru() -> nn.Module:
    return _Recurrent(nn.GRU)


def rnn() -> nn.Module:
    return _Recurrent(nn.RNN)
