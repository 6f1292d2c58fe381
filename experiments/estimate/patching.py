"""What the replay's patches share (experiments/estimate/quirks.py, bnb_quirks.py): whether a tensor is fake, and an
attribute replaced for the length of a block."""

from __future__ import annotations

import contextlib

from torch._subclasses.fake_tensor import FakeTensor


def is_fake(t) -> bool:
    return isinstance(t, FakeTensor)


@contextlib.contextmanager
def patched(obj, name: str, value):
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)
