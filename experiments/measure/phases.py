"""The phase recorder: what every measured run (a device's, a rank's, a replay's) wraps around each phase.

A phase is a context manager `rec(name, step, micro)`: it tells the tracker a phase starts (its listeners mark the
timeline, switch step counting on), synchronises and resets the device's peak counter, tags what the phase
allocates, and at its end reads allocated, reserved and peak bytes and gives what the phase left alive its real
category. `Cancelled` is raised between phases when the caller asks for it.
"""

from __future__ import annotations

import contextlib
import time

import torch

from ..core.errors import Cancelled
from ..core.vocabulary import phase_tag
from ..training.strategies import optimizer_state_tensors


class PhaseRecorder:
    """Wraps each phase: synchronize, reset the peak, run, synchronize, read the counters.

    `state`: the TrainState being trained (set once it exists), whose gradients and optimizer state the recorder
    retags after backward and after the optimizer step."""

    def __init__(self, device, tracker, progress=None, should_cancel=None, total_units: int = 0):
        self.device = device
        self.cuda = device.type == "cuda"
        self.tracker = tracker
        self.phases: list[dict] = []
        self.current = ("setup", 0)
        self.progress = progress
        self.should_cancel = should_cancel
        self.total_units = total_units
        self.done_units = 0
        self.state = None

    def tick(self, label: str) -> None:
        self.done_units += 1
        if self.progress:
            self.progress(min(self.done_units, self.total_units), self.total_units, label)
        if self.should_cancel and self.should_cancel():
            raise Cancelled()

    def timing_progress(self, i: int, n: int) -> None:
        """Within the one unit of the timing steps: a line at every tenth of them, not one per step."""
        if self.progress and i % max(1, n // 10) == 0:
            self.progress(self.done_units, self.total_units, f"timing: {i} of {n} steps")

    @contextlib.contextmanager
    def __call__(self, name: str, step: int, micro: int | None = None):
        self.current = (name, step)
        tr = self.tracker
        tr.phase_started(name, step, micro)
        if self.cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        tr.begin_phase(phase_tag(name))
        t0 = time.perf_counter()
        try:
            yield
        except torch.OutOfMemoryError:
            # The phase that failed is part of the story: its peak is the memory in use when it failed.
            self._append(name, step, micro, t0, failed=True)
            raise
        if self.cuda:
            torch.cuda.synchronize(self.device)
        self._promote(name)
        self._append(name, step, micro, t0)
        tr.phase_ended(name, step, micro, len(self.phases))
        self.tick(f"{name} (step {step})" if step else name)

    def _append(self, name: str, step: int, micro: int | None, t0: float, failed: bool = False) -> None:
        ms = (time.perf_counter() - t0) * 1e3
        if self.cuda:
            allocated = torch.cuda.memory_allocated(self.device)
            reserved = torch.cuda.memory_reserved(self.device)
            peak = torch.cuda.max_memory_allocated(self.device)
        else:
            allocated, reserved, peak = self.tracker.current, None, self.tracker.phase_peak
        row = {
            "step": step,
            "micro": micro,
            "phase": name,
            "allocated_bytes": allocated,
            "reserved_bytes": reserved,
            "peak_bytes": peak,
            "ms": round(ms, 4),
        }
        if failed:
            row["failed"] = True
        self.phases.append(row)

    def _promote(self, name: str) -> None:
        """Give what a phase left alive its real category."""
        tr, s = self.tracker, self.state
        if name == "forward":
            tr.retag_live(phase_tag("forward"), "activations")
        elif name == "backward" and s is not None:
            tr.retag((p.grad for p in s.model.parameters()), "gradients")
        elif name == "optimizer_step" and s is not None:
            tr.retag(optimizer_state_tensors(s.optimizer), "optimizer_state")
