"""Counts tensor memory by tracking storages, on any device, with a category for each allocation.

On CPU this is the only memory measurement there is. On CUDA the byte counts come from the
caching allocator's statistics and this tracker only supplies the category breakdown.
"""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ..core.vocabulary import TENSOR_CATEGORIES as CATEGORIES

_to_copy = torch.ops.aten._to_copy.default


class _Record:
    __slots__ = ("nbytes", "tag")

    def __init__(self, nbytes: int, tag: str):
        self.nbytes = nbytes
        self.tag = tag


def storage_key(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


class StorageTracker(TorchDispatchMode):
    """Sees every tensor an aten op returns; a storage counts from its first sighting until it dies.

    `budget_bytes` makes the tracker raise `torch.OutOfMemoryError` when the live total would pass
    it, so an out-of-memory lesson can be run on a machine without a GPU.
    """

    def __init__(self, budget_bytes: int | None = None, block: int = 1):
        super().__init__()
        self.block = block  # count each storage rounded up to this (the CUDA allocator's 512-byte blocks)
        self.live: dict[int, _Record] = {}
        self._refs: dict[int, weakref.ref] = {}
        self.current = 0
        self.peak = 0
        self.peak_snapshot: dict[int, _Record] = {}
        self.phase_peak = 0
        self.tag = "temporaries"
        self.param_keys: set[int] = set()
        self.budget_bytes = budget_bytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        tag = self.tag
        # Autocast's low-precision weight copies are _to_copy calls on a parameter.
        if func is _to_copy and args and isinstance(args[0], torch.Tensor) and storage_key(args[0]) in self.param_keys:
            tag = "autocast_copies"
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self.track(t, tag, self.storage_nbytes(func, args, t))
        return out

    def storage_nbytes(self, func, args, t: torch.Tensor) -> int:
        """Bytes of the storage behind an op's output (the fake-tensor replay corrects what meta kernels get wrong)."""
        return t.untyped_storage().nbytes()

    def track(self, t: torch.Tensor, tag: str, nbytes: int | None = None) -> None:
        st = t.untyped_storage()
        key = st._cdata
        if key in self.live:
            return
        nbytes = st.nbytes() if nbytes is None else nbytes
        if self.block > 1:
            nbytes = -(-nbytes // self.block) * self.block
        if self.budget_bytes is not None and nbytes and self.current + nbytes > self.budget_bytes:
            raise torch.OutOfMemoryError(
                f"Simulated out of memory on CPU. Tried to allocate {nbytes / 2**20:.2f} MiB ({nbytes} bytes); "
                f"{self.current / 2**20:.2f} MiB of the {self.budget_bytes / 2**20:.2f} MiB budget is in use."
            )
        self.live[key] = _Record(nbytes, tag)
        self._refs[key] = weakref.ref(st, lambda _ref, key=key: self._free(key))
        self.current += nbytes
        if self.current > self.phase_peak:
            self.phase_peak = self.current
        if self.current > self.peak:
            self.peak = self.current
            self.peak_snapshot = dict(self.live)

    def _free(self, key: int) -> None:
        rec = self.live.pop(key, None)
        self._refs.pop(key, None)
        if rec is not None:
            self.current -= rec.nbytes

    def begin_phase(self, tag: str) -> None:
        self.tag = tag
        self.phase_peak = self.current

    def retag(self, tensors, tag: str) -> None:
        for t in tensors:
            if isinstance(t, torch.Tensor):
                rec = self.live.get(storage_key(t))
                if rec is not None:
                    rec.tag = tag

    def retag_live(self, from_tag: str, to_tag: str) -> None:
        for rec in self.live.values():
            if rec.tag == from_tag:
                rec.tag = to_tag

    def by_category(self, records: dict[int, _Record] | None = None) -> dict[str, int]:
        totals = dict.fromkeys(CATEGORIES, 0)
        for rec in (self.live if records is None else records).values():
            # Phase-local tags ("_forward", ...) that were never promoted are transient buffers.
            totals[rec.tag if rec.tag in totals else "temporaries"] += rec.nbytes
        return totals

    def peak_by_category(self) -> dict[str, int]:
        return self.by_category(self.peak_snapshot)
