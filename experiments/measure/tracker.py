"""Counts tensor memory by tracking storages, on any device, with a category for each allocation.

On CPU this is the only memory measurement there is. On CUDA the byte counts come from the caching allocator's
statistics and this tracker only supplies the category breakdown.

One `MemoryTracker` (a TorchDispatchMode) counts; what else a run wants to know listens to it. A listener is any
object with some of these methods, each called with the tracker first:
    before_op()                              before every op (after watched storages were re-read)
    after_op(func, args, kwargs, out)        after every op, its outputs counted
    allocated(key, record, tensor, requested) a storage starts counting (`requested`: bytes before rounding)
    freed(key, record)                       a counted storage died or left the device
    resized(key, old, new)                   a watched storage changed size in place (FSDP2)
    held(items)                              a kernel's scratch buffers, [(key, nbytes)], came and went together
                                             (hold_scratch)
    phase_started(name, step, micro) / phase_ended(name, step, micro, index)   from the phase recorder
    parameters(params, wrapped)              the model's parameters, after it was built or wrapped
The listeners: the allocation log and step counting of the replay (experiments/estimate/replay.py), the timeline
(experiments/measure/history.py), the census (experiments/measure/census.py), a rank's shards
(experiments/distributed/rank.py) and CPU offload's host accounting (experiments/distributed/replay.py).
"""

from __future__ import annotations

import contextlib
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ..core.units import fmt_mib
from ..core.vocabulary import TENSOR_CATEGORIES as CATEGORIES
from . import engine_sums

_to_copy = torch.ops.aten._to_copy.default
_add_ = torch.ops.aten.add_.Tensor
HOOKS = ("before_op", "after_op", "allocated", "freed", "resized", "held", "phase_started", "phase_ended", "parameters")


class Record:
    __slots__ = ("nbytes", "tag")

    def __init__(self, nbytes: int, tag: str):
        self.nbytes = nbytes
        self.tag = tag


def storage_key(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


def _same(t):
    return t


class MemoryTracker(TorchDispatchMode):
    """Sees every tensor an aten op returns; a storage counts from its first sighting until it dies.

    `budget_bytes` makes the tracker raise `torch.OutOfMemoryError` when the live total would pass it, so an
    out-of-memory lesson can be run on a machine without a GPU. `block`: count each storage rounded up to it (the
    CUDA allocator's 512-byte blocks). `categories`: the breakdown's keys. `sizer(func, args, t)`: the bytes
    behind an op's output where a kernel's storage is not what its tensor shows (the replay's fake kernels).
    `local(t)`: the tensor that owns the memory (a DTensor's shard). `host_apart`: storages in host memory are
    counted in a ledger of their own (`host_*`), never in the device's figures (a GPU rank's CPU offload).
    `off_device_tags`: phases whose ops run where the device sees none of them (CPU offload's optimizer step).
    `untracked_devices`: devices whose tensors hold no memory (the meta device: a skeleton built before its weights).
    """

    def __init__(
        self,
        budget_bytes: int | None = None,
        block: int = 1,
        listeners=(),
        categories=CATEGORIES,
        sizer=None,
        local=None,
        host_apart: bool = False,
        untracked_devices: tuple[str, ...] = ("meta",),
        off_device_tags=(),
    ):
        super().__init__()
        self.block = block
        self.budget_bytes = budget_bytes
        self.categories = tuple(categories)
        self.sizer = sizer
        self.local = local or _same
        self.host_apart = host_apart
        self.untracked_devices = untracked_devices
        self.host_round = None  # inside on_host(): new storages are host memory
        self.off_device_tags = frozenset(off_device_tags)
        self.live: dict[int, Record] = {}
        self.current = self.peak = self.phase_peak = 0
        self.peak_snapshot: dict[int, Record] = {}
        self.host_live: dict[int, Record] = {}  # host memory only, never in self.live
        self.host_current = self.host_peak = 0
        self.host_peak_snapshot: dict[int, Record] = {}
        self.watch: dict[int, weakref.ref] = {}  # storage key -> a storage resized in place (FSDP2's parameters)
        self._refs: dict[int, weakref.ref] = {}
        self._scratch = 0
        self.tag = "temporaries"
        self.param_keys: set[int] = set()
        self._param_refs: list = []
        self.listeners = list(listeners)
        if engine_sums.ENABLED:
            engine_sums.baseline()  # measured before any op: a dispatch handler cannot run the probe's backward
        for hook in HOOKS:
            setattr(self, f"_{hook}", [getattr(x, hook) for x in self.listeners if hasattr(x, hook)])

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.tag in self.off_device_tags:
            return func(*args, **kwargs)
        if self.watch:
            self.resync()
        for hook in self._before_op:
            hook(self)
        # The engine's sums of two gradients, in place where a plain engine makes them so (engine_sums.py; opt-in).
        out = _add_(*args) if engine_sums.sums_in_place(func, args, kwargs) else func(*args, **kwargs)
        tag = self.tag
        # Autocast's low-precision weight copies are _to_copy calls on a parameter.
        if func is _to_copy and args and isinstance(args[0], torch.Tensor) and self._is_parameter(args[0]):
            tag = "autocast_copies"
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                t = self.local(t)
                self.track(t, tag, self.sizer(func, args, t) if self.sizer else None)
        for hook in self._after_op:
            hook(self, func, args, kwargs, out)
        return out

    # -- counting --------------------------------------------------------------------------------------------
    def track(self, t: torch.Tensor, tag: str, nbytes: int | None = None) -> None:
        if self.tag in self.off_device_tags:
            return
        t = self.local(t)
        if t.device.type in self.untracked_devices:
            return  # a skeleton on the meta device (a quantized model's before its layers are loaded): no memory
        st = t.untyped_storage()
        key = st._cdata
        if key in self.live or key in self.host_live:
            return
        nbytes = st.nbytes() if nbytes is None else nbytes
        if self.host_round is not None or (self.host_apart and t.device.type == "cpu"):
            self._add_host(key, Record(self.host_round(nbytes) if self.host_round else nbytes, tag))
            self._refs[key] = weakref.ref(st, lambda _ref, key=key: self._free(key))
            return
        requested = nbytes
        if self.block > 1:
            nbytes = -(-nbytes // self.block) * self.block
        if self.budget_bytes is not None and nbytes and self.current + nbytes > self.budget_bytes:
            raise torch.OutOfMemoryError(
                f"Simulated out of memory on CPU. Tried to allocate {fmt_mib(nbytes)} ({nbytes} bytes); "
                f"{fmt_mib(self.current)} of the {fmt_mib(self.budget_bytes)} budget is in use."
            )
        rec = self.live[key] = Record(nbytes, tag)
        self._refs[key] = weakref.ref(st, lambda _ref, key=key: self._free(key))
        self.current += nbytes
        if self.current > self.phase_peak:
            self.phase_peak = self.current
        if self.current > self.peak:
            self.peak = self.current
            self.peak_snapshot = dict(self.live)
        for hook in self._allocated:
            hook(self, key, rec, t, requested)

    def _add_host(self, key: int, rec: Record) -> None:
        self.host_live[key] = rec
        self.host_current += rec.nbytes
        if self.host_current > self.host_peak:
            self.host_peak = self.host_current
            self.host_peak_snapshot = dict(self.host_live)

    def _free(self, key: int) -> None:
        self._refs.pop(key, None)
        rec = self.live.pop(key, None)
        if rec is not None:
            self.current -= rec.nbytes
            for hook in self._freed:
                hook(self, key, rec)
            return
        rec = self.host_live.pop(key, None)
        if rec is not None:
            self.host_current -= rec.nbytes

    @contextlib.contextmanager
    def on_host(self, round_bytes):
        """Storages made inside go to the host ledger, `round_bytes(nbytes)` each (a replay's pinned copies)."""
        self.host_round = round_bytes
        try:
            yield
        finally:
            self.host_round = None

    def move_to_host(self, t: torch.Tensor) -> None:
        """A device storage that the real run copies to host memory and frees on the device (CPU offload)."""
        key = storage_key(self.local(t))
        rec = self.live.pop(key, None)
        if rec is None:
            return
        self.current -= rec.nbytes
        for hook in self._freed:
            hook(self, key, rec)
        self.watch.pop(key, None)
        self._add_host(key, rec)

    def watch_storage(self, t: torch.Tensor) -> None:
        """Re-read this storage's size before every op: FSDP2 resizes its unsharded parameters in place
        (`storage.resize_`), which no dispatch mode sees."""
        st = self.local(t).untyped_storage()
        self.watch[st._cdata] = weakref.ref(st)

    def resync(self) -> None:
        for key, ref in list(self.watch.items()):
            rec, storage = self.live.get(key), ref()
            if rec is None or storage is None:
                self.watch.pop(key, None)
                continue
            nbytes = -(-storage.nbytes() // self.block) * self.block
            if nbytes != rec.nbytes:
                self.current += nbytes - rec.nbytes
                # A new record, not a mutated one: the peak snapshot taken earlier keeps the size it saw.
                self.live[key] = Record(nbytes, rec.tag)
                self.phase_peak = max(self.phase_peak, self.current)
                if self.current > self.peak:
                    self.peak = self.current
                    self.peak_snapshot = dict(self.live)
                for hook in self._resized:
                    hook(self, key, rec.nbytes, nbytes)

    def hold_scratch(self, *sizes: int) -> None:
        """A library's scratch buffers, alive together only while its op runs: in the peak, never in a category."""
        # A buffer of 0 bytes takes no memory; one that keeps its place (a sum's, experiments/estimate/
        # reduce_scratch.Buffer) still goes to the listeners, so the allocation trace has the sum at every batch.
        sizes = tuple(n for n in sizes if n > 0 or getattr(n, "keeps_place", False))
        if not sizes or self.tag in self.off_device_tags:
            return
        items = []
        for nbytes in sizes:
            self._scratch -= 1
            items.append((self._scratch, nbytes))
        for hook in self._held:
            hook(self, items)
        total = sum(-(-n // self.block) * self.block for n in sizes)
        self.phase_peak = max(self.phase_peak, self.current + total)
        if self.current + total > self.peak:
            self.peak = self.current + total
            self.peak_snapshot = dict(self.live)

    def reset_peak(self) -> None:
        """Start the run's peak here (a rank's training steps, leaving the setup's build-then-shard moment out)."""
        self.peak = self.current
        self.peak_snapshot = dict(self.live)
        self.host_peak = self.host_current
        self.host_peak_snapshot = dict(self.host_live)

    # -- what the phase recorder and the setup tell it --------------------------------------------------------
    def phase_started(self, name: str, step: int, micro: int | None) -> None:
        for hook in self._phase_started:
            hook(self, name, step, micro)

    def phase_ended(self, name: str, step: int, micro: int | None, index: int) -> None:
        for hook in self._phase_ended:
            hook(self, name, step, micro, index)

    def begin_phase(self, tag: str) -> None:
        self.tag = tag
        self.phase_peak = self.current

    def set_parameters(self, params, wrapped: bool = False) -> None:
        """The model's parameters: their copies under autocast are "autocast_copies". After a wrap (a rank's
        shards, allocated in the wrap phase) they are retagged as parameters too."""
        params = list(params)
        if wrapped:
            self.retag(params, "parameters")
        self._param_refs = [weakref.ref(p) for p in params]
        self.param_keys = {storage_key(self.local(p)) for p in params}
        for hook in self._parameters:
            hook(self, params, wrapped)

    def _is_parameter(self, t: torch.Tensor) -> bool:
        """Whether t's storage is a parameter's now. A parameter's storage can be replaced after set_parameters
        (bitsandbytes sets a bias's `.data` in its first forward), and a freed one's address reused: a key that no
        parameter holds any more refreshes the keys from the parameters themselves."""
        key = storage_key(t)
        if key not in self.param_keys:
            return False
        live = {storage_key(self.local(p)) for p in (r() for r in self._param_refs) if p is not None}
        if key in live:
            return True
        self.param_keys = live
        return False

    def record_of(self, t) -> Record | None:
        if not isinstance(t, torch.Tensor):
            return None
        key = storage_key(self.local(t))
        return self.live.get(key) or self.host_live.get(key)

    def retag(self, tensors, tag: str) -> None:
        for t in tensors:
            rec = self.record_of(t)
            if rec is not None:
                rec.tag = tag

    def retag_live(self, from_tag: str, to_tag: str) -> None:
        for rec in (*self.live.values(), *self.host_live.values()):
            if rec.tag == from_tag:
                rec.tag = to_tag

    # -- the breakdown ----------------------------------------------------------------------------------------
    def by_category(self, records: dict[int, Record] | None = None) -> dict[str, int]:
        totals = dict.fromkeys(self.categories, 0)
        for rec in (self.live if records is None else records).values():
            # Phase-local tags ("_forward", ...) that were never promoted are transient buffers.
            totals[rec.tag if rec.tag in totals else "temporaries"] += rec.nbytes
        return totals

    def peak_by_category(self) -> dict[str, int]:
        return self.by_category(self.peak_snapshot)

    def host_peak_by_category(self) -> dict[str, int]:
        return self.by_category(self.host_peak_snapshot)
