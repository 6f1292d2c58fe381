"""Every allocation of a run, in order: a compact, JSON-able timeline (and, on CUDA, the allocator's segments at the
peak: experiments/measure/segments.py).

On CUDA the source is the caching allocator's own history (`torch.cuda.memory._record_memory_history` and
`_snapshot()`); each allocation gets a category by matching its address with the storages the engine's
tracker saw in the same phase. What the tracker never saw is not a tensor of the model (cuBLAS/cuDNN
workspaces, buffers an operator allocates and frees inside itself): category "other".
On CPU there is no caching allocator: the same timeline comes from the storage tracker's own events.

Result (`result["history"]`):
    source        "cuda_snapshot" | "cpu_tracker"
    start_bytes   bytes allocated when recording started (the baseline: CUDA context workspaces)
    events        [{"seq", "t_ms", "bytes" (+alloc / -free), "category", "phase", "frame", "addr", "n", "parts"?}]
    phases        [{"index", "phase", "step", "micro", "seq"}]: the event index where each phase starts
    peak_bytes, final_bytes, raw_events, coalesced (bool), truncated (bool)
    segments      (CUDA) reserved segments and their blocks at the peak; segments_at: "peak" | "end"
    snapshot      (CUDA) {"path", "bytes"}: the raw snapshot, pickled with protocol 4 for pytorch.org/memory_viz
"""

from __future__ import annotations

import inspect
import os
import sys
import time
from collections import defaultdict, deque

import torch

from ..core.timeline import build, live_categories
from ..core.vocabulary import TENSOR_CATEGORIES as CATEGORIES
from ..estimate.allocator_model import round_size
from . import tracker as _tracker_module
from .segments import save_snapshot, segments_at

# The allocator keeps this many trace entries (a ring buffer; each entry with Python frames costs a few KB of
# host memory). Older entries of a larger run are dropped: the timeline says so ("truncated").
MAX_ENTRIES = 20_000

_TORCH_DIR = os.path.dirname(torch.__file__)
# The tracker and this listener are bookkeeping, not the code that allocated.
_SKIP_FILES = {os.path.abspath(__file__), os.path.abspath(_tracker_module.__file__)}
_MARKER = "_cuda_phase_marker"


def _user_file(filename: str) -> bool:
    return (
        bool(filename)
        and not filename.startswith(_TORCH_DIR)
        and "/torch/" not in filename
        and os.path.abspath(filename) not in _SKIP_FILES
        and not filename.startswith("<")
    )


def _frame_text(filename: str, line: int, name: str) -> str:
    return f"{os.path.basename(filename)}:{line} {name}"


def python_frame() -> str | None:
    """The innermost frame of the caller's stack outside torch and this engine's bookkeeping."""
    f = sys._getframe(2)
    while f is not None:
        if _user_file(f.f_code.co_filename):
            return _frame_text(f.f_code.co_filename, f.f_lineno, f.f_code.co_name)
        f = f.f_back
    return None


def trace_frame(frames: list[dict] | None) -> str | None:
    """The same for a CUDA trace entry's frames (innermost first)."""
    for fr in frames or []:
        if _user_file(fr.get("filename", "")):
            return _frame_text(fr["filename"], fr.get("line", 0), fr.get("name", "?"))
    return None


def _category(rec) -> str:
    # Phase-local tags never promoted ("_forward", ...) are transient buffers, as in tracker.by_category.
    return rec.tag if rec.tag in CATEGORIES else "temporaries"


class Recording:
    """Records one run's allocations, as a listener of the run's MemoryTracker: start() before the setup phases,
    then every allocation and free the tracker counts (with its phase and, on CPU, its frame), finish().

    A record's category is read when the timeline is built: the phase recorder promotes tags after each phase
    ("_forward" -> "activations", gradients, optimizer state), so a freed storage keeps its final tag.
    On CUDA the frames come from the allocator's own trace; the tracker's events give the categories."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"
        self.frames = not self.cuda
        self.tracker = None
        self.phases: list[dict] = []
        self.markers: list[int] = []
        self.events: list[tuple] = []  # (t, +/-bytes, record, ptr, frame, phase) as the tracker saw them
        self.phase_index = -1
        self.logging = True
        self.result: dict | None = None
        self.start_bytes = 0
        self.recording = False
        self._t0 = time.perf_counter()

    def allocated(self, tracker, key: int, rec, t: torch.Tensor, requested: int) -> None:
        if self.logging and rec.nbytes:
            ptr = t.untyped_storage().data_ptr()
            frame = python_frame() if self.frames else None
            self.events.append((time.perf_counter() - self._t0, rec.nbytes, rec, ptr, frame, self.phase_index))

    def freed(self, tracker, key: int, rec) -> None:
        if self.logging and rec.nbytes:
            self.events.append((time.perf_counter() - self._t0, -rec.nbytes, rec, None, None, self.phase_index))

    def phase_started(self, tracker, name: str, step: int, micro: int | None) -> None:
        self.phase_index = len(self.phases)
        seq = len(self.events)
        if self.cuda and self.recording:
            seq = None  # known only once the trace is read: the marker's position
            self._cuda_phase_marker()
        self.phases.append({"index": len(self.phases), "phase": name, "step": step, "micro": micro, "seq": seq})

    def start(self, tracker) -> None:
        self.tracker = tracker
        if self.cuda:
            self.start_bytes = torch.cuda.memory_allocated(self.device)
            kwargs = {"max_entries": MAX_ENTRIES, "context": "alloc", "stacks": "python"}
            if "clear_history" in inspect.signature(torch.cuda.memory._record_memory_history).parameters:
                kwargs["clear_history"] = True  # a previous run's entries must not show up in this one's
            torch.cuda.memory._record_memory_history(**kwargs)
            self.recording = True
            self._cuda_phase_marker()  # marks where this run's entries start
        else:
            self.start_bytes = self.tracker.current

    def _cuda_phase_marker(self) -> None:
        """A 1-byte raw allocation, freed at once, whose stack names this function: a phase boundary in the
        allocator's trace that needs no clock. It bypasses the tracker (no tensor), and it happens before the
        phase resets the peak counter, so no reported figure contains it."""
        try:
            ptr = torch.cuda.caching_allocator_alloc(1, device=self.device)
        except torch.OutOfMemoryError:
            self.markers.append(-1)
            return
        torch.cuda.caching_allocator_delete(ptr)
        self.markers.append(ptr)

    def finish(self) -> dict:
        """Stop recording and build the timeline; called once after the measured steps (or an OOM)."""
        if self.result is not None:
            return self.result
        self.logging = False
        try:
            self.result = self._finish_cuda() if self.cuda else self._finish_cpu()
        except Exception as e:  # noqa: BLE001 - a timeline that fails must not fail the run it describes
            self.result = {"error": f"{type(e).__name__}: {e}"}
        finally:
            self.stop()
        return self.result

    def stop(self) -> None:
        if self.recording:
            self.recording = False
            torch.cuda.memory._record_memory_history(enabled=None)

    def _finish_cpu(self) -> dict:
        events = []
        born: dict[int, tuple] = {}  # a free is shown with the address and frame of its allocation
        for i, (t, nbytes, rec, ptr, frame, phase) in enumerate(self.events):
            if nbytes > 0:
                born[id(rec)] = (ptr, frame)
            else:
                ptr, frame = born.pop(id(rec), (None, None))
            events.append(
                {
                    "seq": i,
                    "t_ms": round(t * 1e3, 3),
                    "bytes": nbytes,
                    "category": _category(rec),
                    "phase": phase,
                    "frame": frame,
                    "addr": ptr,
                    "n": 1,
                }
            )
        return build(events, self.phases, self.start_bytes, source="cpu_tracker")

    def _finish_cuda(self) -> dict:
        torch.cuda.synchronize(self.device)
        end_bytes = torch.cuda.memory_allocated(self.device)
        snapshot = torch.cuda.memory._snapshot()
        self.stop()
        index = self.device.index if self.device.index is not None else torch.cuda.current_device()
        trace = snapshot["device_traces"][index]
        events, phase_seq, truncated, start, tindex = trace_events(trace, self.markers, self.events)
        for p, seq in zip(self.phases, phase_seq[1:], strict=False):
            p["seq"] = seq
        segs = [s for s in snapshot.get("segments", []) if s.get("device", index) == index]
        start_bytes = end_bytes - sum(e["bytes"] for e in events)
        out = build(events, self.phases, start_bytes, source="cuda_snapshot")
        out["truncated"] = truncated
        peak_at = tindex[out["peak_seq"]] if out["peak_seq"] is not None else None
        out["segments"], out["segments_at"] = segments_at(segs, trace[start:], peak_at, live_categories(events, out))
        out["snapshot"] = save_snapshot(snapshot)
        return out


def trace_events(
    trace: list[dict], markers: list[int], tracked: list[tuple]
) -> tuple[list[dict], list, bool, int, list]:
    """The allocator's trace -> events with a phase, a category and a frame.

    Returns (events, seq of each marker, truncated, index of the first entry after the start marker, and for
    every event its index in trace[start:]).
    Categories: a trace allocation takes the category of the tracker's storage with the same address in the same
    phase (in order, the block at least as large as the storage); an allocation no tensor explains is "other".
    """

    def is_marker(e, k):
        # The address alone is not enough: the marker's 512-byte block is reused by other small allocations.
        return (
            e.get("action") == "alloc"
            and k < len(markers)
            and e.get("addr") == markers[k]
            and any(f.get("name") == _MARKER for f in e.get("frames") or [])
        )

    # Where this run starts: the first marker (a ring buffer that wrapped may have dropped it).
    start, k = 0, 0
    for i, e in enumerate(trace):
        if is_marker(e, 0):
            start, k = i + 1, 1
            break
    truncated = k == 0 and bool(markers) and markers[0] != -1
    if markers and markers[0] == -1:
        k = 1
    candidates: dict[tuple[int, int], deque] = defaultdict(deque)
    for _t, nbytes, rec, ptr, _frame, phase in tracked:
        if nbytes > 0 and ptr:
            candidates[(phase, ptr)].append((nbytes, rec))
    events: list[dict] = []
    tindex: list[int] = []
    live: dict[int, tuple[str, str | None]] = {}
    marker_seq: list = [0]
    phase = -1
    skip_free: set[int] = {markers[0]} if not truncated and markers and markers[0] != -1 else set()
    t0 = trace[start]["time_us"] if start < len(trace) and "time_us" in trace[start] else None
    for ti, e in enumerate(trace[start:]):
        action, addr, size = e.get("action"), e.get("addr"), int(e.get("size", 0))
        if action in ("alloc", "free_completed"):
            # The trace keeps a small request's own size (a reduction's 4-byte semaphore); memory_allocated
            # counts the 512-byte block it got.
            size = round_size(size)
        while k < len(markers) and markers[k] == -1:  # a marker that could not be allocated: no boundary seen
            marker_seq.append(None)
            phase, k = k - 1, k + 1
        n_before = len(events)
        if is_marker(e, k):
            marker_seq.append(len(events))
            phase, k = k - 1, k + 1
            skip_free.add(addr)
            continue
        if action in ("free_requested", "free_completed") and addr in skip_free:
            if action == "free_completed":
                skip_free.discard(addr)
            continue
        t_ms = round((e["time_us"] - t0) / 1e3, 3) if t0 is not None and "time_us" in e else None
        if action == "alloc":
            category, queue = "other", candidates.get((phase, addr))
            if queue:
                nbytes, rec = queue[0]
                rounded = -(-nbytes // 512) * 512
                if rounded <= size <= rounded + 2**21:  # an unsplit block may carry up to ~1 MiB of remainder
                    queue.popleft()
                    category = _category(rec)
            frame = trace_frame(e.get("frames"))
            live[addr] = (category, frame)
            events.append(
                {
                    "seq": len(events),
                    "t_ms": t_ms,
                    "bytes": size,
                    "category": category,
                    "phase": phase,
                    "frame": frame,
                    "addr": addr,
                    "n": 1,
                }
            )
        elif action == "free_completed":
            category, frame = live.pop(addr, ("other", None))
            events.append(
                {
                    "seq": len(events),
                    "t_ms": t_ms,
                    "bytes": -size,
                    "category": category,
                    "phase": phase,
                    "frame": frame,
                    "addr": addr,
                    "n": 1,
                }
            )
        elif action == "oom":
            events.append(
                {
                    "seq": len(events),
                    "t_ms": t_ms,
                    "bytes": 0,
                    "category": "oom",
                    "phase": phase,
                    "frame": trace_frame(e.get("frames")),
                    "addr": None,
                    "n": 1,
                    "oom_bytes": size,
                }
            )
        if len(events) > n_before:
            tindex.append(ti)
    return events, marker_seq, truncated, start, tindex
