"""Leak scenarios: the same small training loop with one habit changed, memory read after every step."""

from __future__ import annotations

import contextlib
import datetime as _dt
import gc

import torch
import torch.nn.functional as F
from torch import nn

from ..core import metrics
from ..core.capacity import capacity
from ..core.config import ConfigError

# The scenarios and a leak run's sizes, torch-free, so that the command line's help needs no torch.
from ..core.leak_scenarios import DEFAULTS, LIMITS, SCENARIOS  # noqa: F401 - the lab's names, re-exported
from ..core.units import fmt_gib
from ..measure import census
from ..measure.device import cpu_available_bytes, device_info, resolve_device
from ..measure.fits import REFUSE_FACTOR, WouldNotFit
from ..measure.tracker import MemoryTracker

# The exercise loop's habits: what `losses` keeps, whether zero_grad runs, what the module caches.
LOOP_CHOICES = {"keep": ("loss", "detach", "item"), "zero_grad": (False, True), "cache": ("keep", "detach", "none")}
COURSE_LOOP = {"keep": "loss", "zero_grad": False, "cache": "keep"}


def exercise_loop(loop: dict | None) -> dict:
    """The exercise loop's habits over the course's (every bug present); ConfigError names a bad field."""
    merged = dict(COURSE_LOOP)
    for name, value in (loop or {}).items():
        if name not in LOOP_CHOICES:
            raise ConfigError(
                "loop",
                f"unknown habit {name!r}; known: {', '.join(LOOP_CHOICES)}",
                "unknown",
                value=name,
                known=", ".join(LOOP_CHOICES),
            )
        if value not in LOOP_CHOICES[name] or isinstance(value, bool) != isinstance(LOOP_CHOICES[name][0], bool):
            allowed = ", ".join(map(str, LOOP_CHOICES[name]))
            raise ConfigError(
                f"loop.{name}", f"got {value!r}; allowed: {allowed}", "choice", value=value, allowed=allowed
            )
        merged[name] = value
    return merged


def _gradient_error(model, x, y) -> float:
    """||.grad - gradient of this step's loss alone|| / ||the latter||, at the same weights: 0 when the step
    used its own gradient, about k - 1 after k steps without zero_grad (the gradients were summed)."""
    params = [p for p in model.parameters()]
    fresh = torch.autograd.grad(F.mse_loss(model.body(x), y), params)  # the body: nothing is cached
    diff = sum(((p.grad - g) ** 2).sum() for p, g in zip(params, fresh, strict=True)).sqrt()
    norm = sum((g**2).sum() for g in fresh).sqrt().clamp_min(1e-30)
    return (diff / norm).item()


class _CachingMLP(nn.Module):
    def __init__(self, width: int, layers: int, cache: str | None):
        super().__init__()
        self.body = nn.Sequential(*[m for _ in range(layers) for m in (nn.Linear(width, width), nn.ReLU())])
        self.cache_mode = cache
        self.cache: list[torch.Tensor] = []

    def forward(self, x):
        out = self.body(x)
        if self.cache_mode == "keep":
            self.cache.append(out)
        elif self.cache_mode == "detach":
            self.cache.append(out.detach())
        return out


class _StepLog:
    """A record of one step that refers to itself through a bound method, a common accidental reference cycle:
    reference counting never frees it, only Python's cyclic garbage collector does."""

    def __init__(self, output: torch.Tensor):
        self.output = output
        self.report = self.describe

    def describe(self) -> tuple:
        return tuple(self.output.shape)


@contextlib.contextmanager
def _collector_off(off: bool):
    """Python's cyclic collector runs after so many object allocations, not when memory is short. Off for the
    reference-cycle run, whose staircase then does not depend on when it would have run."""
    was = gc.isenabled()
    if off:
        gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def worst_case_bytes(steps: int, batch: int, width: int, layers: int) -> int:
    """An upper bound for any scenario: weights and gradients, the data, one forward's saved tensors (two per
    layer and the output) plus the loss's full-size storage, kept by every step (the eval-loop leak)."""
    act = batch * width * 4
    return 2 * layers * (width * width + width) * 4 + 2 * act + (steps + 1) * (2 * layers + 2) * act


def _check_fits(dev, steps: int, batch: int, width: int, layers: int) -> None:
    if dev.type == "cuda":
        free, _ = torch.cuda.mem_get_info(dev)
        available = capacity(None, free, torch.cuda.memory_reserved(dev) - torch.cuda.memory_allocated(dev))
    else:
        available = capacity(None, cpu_available_bytes())
    need = worst_case_bytes(steps, batch, width, layers)
    if available is not None and need > REFUSE_FACTOR * available:
        raise WouldNotFit(
            f"a leak run of these sizes may need {fmt_gib(need)}; {fmt_gib(available)} is available on "
            f"{dev.type}; reduce batch, width, layers or steps",
            {"peak_bytes": need},
            "capacity",
            peak_bytes=need,
            available_bytes=available,
        )


def run_leak(
    scenario: str,
    steps: int = DEFAULTS["steps"],
    device: str = "auto",
    batch: int = DEFAULTS["batch"],
    width: int = DEFAULTS["width"],
    layers: int = DEFAULTS["layers"],
    loop: dict | None = None,
) -> dict:
    """`loop`: for "exercise_loop" only, the habits fixed over the course's loop (see exercise_loop)."""
    habits = exercise_loop(loop) if scenario == "exercise_loop" else None
    if scenario not in SCENARIOS:
        raise ConfigError(
            "scenario",
            f"got {scenario!r}; allowed: {', '.join(SCENARIOS)}",
            "choice",
            value=scenario,
            allowed=", ".join(SCENARIOS),
        )
    for name, value in (("steps", steps), ("batch", batch), ("width", width), ("layers", layers)):
        lo, hi = LIMITS[name]
        if not isinstance(value, int) or not lo <= value <= hi:
            raise ConfigError(name, f"got {value!r}; allowed range is [{lo}, {hi}]", "range", value=value, lo=lo, hi=hi)
    dev = resolve_device(device)
    cuda = dev.type == "cuda"
    _check_fits(dev, steps, batch, width, layers)
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    counted = census.Census()  # what the tracker counts, with each storage's shape
    tracker = MemoryTracker(listeners=[counted])

    def allocated() -> int:
        if cuda:
            torch.cuda.synchronize(dev)
            return torch.cuda.memory_allocated(dev)
        return tracker.current

    torch.manual_seed(0)
    per_step = []
    kept: list = []
    censuses: list = []
    grad_error = None
    log = None  # the reference-cycle scenario's record of the current step
    with tracker, _collector_off(scenario == "reference_cycle"):
        cache = {"cache_outputs": "keep", "cache_outputs_detached": "detach"}.get(scenario)
        if habits:
            cache = None if habits["cache"] == "none" else habits["cache"]
        model = _CachingMLP(width, layers, cache).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        x = torch.randn(batch, width, device=dev)
        y = torch.randn(batch, width, device=dev)
        base = allocated()
        per_step.append({"step": 0, "allocated_bytes": base})
        for step in range(1, steps + 1):
            if scenario != "no_zero_grad" and (habits is None or habits["zero_grad"]):
                opt.zero_grad(set_to_none=True)
            out = model(x)
            if scenario == "reference_cycle":
                log = _StepLog(out)  # rebinding it next step leaves the old record, output and all, to the collector
            # mse_loss allocates its result at the (batch, width) broadcast shape and resize_s it to
            # 0-dim; a resize never shrinks a storage, so a kept loss pins batch x width x 4 bytes.
            # The hand-written mean is a reduction with a real 0-dim output.
            loss = ((out - y) ** 2).mean() if scenario == "append_scalar_loss_after_backward" else F.mse_loss(out, y)
            del out
            if scenario == "append_loss_no_backward":
                kept.append(loss)  # no backward, no no_grad: the graph stays reachable
            else:
                loss.backward()
                if habits and step == steps:
                    grad_error = _gradient_error(model, x, y)  # before the update, at the weights backward saw
                opt.step()
                if habits:
                    keep = habits["keep"]
                    kept.append(loss if keep == "loss" else loss.detach() if keep == "detach" else loss.item())
                else:
                    kept.append(loss if scenario.startswith("append_") else loss.item())
            del loss
            per_step.append({"step": step, "allocated_bytes": allocated()})
            if step >= steps - 1 and steps >= 2:
                # The census at the end of the last two steps: what one more step added, and who holds it.
                censuses.append(
                    counted.take(tracker, {"losses": kept, "model": model, "optimizer": opt, "x": x, "y": y})
                )
        del log  # now every step's record is unreachable: only a reference cycle still holds one
        before = allocated()
        gc.collect()
        gc_freed = before - allocated()
    growth = metrics.growth_per_step(per_step)
    tensor_census = census.diff(*censuses, steps=(steps - 1, steps)) if len(censuses) == 2 else None
    del kept, model, opt, x, y, censuses
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return {
        "scenario": scenario,
        "device": device_info(dev.type),
        "per_step": per_step,
        "growth_bytes_per_step": growth,
        "started_at": started,
        "batch": batch,
        "width": width,
        "layers": layers,
        "census": tensor_census,
        "gc_freed_bytes": gc_freed,
        **({"loop": habits, "gradient_error": grad_error} if habits else {}),
    }
