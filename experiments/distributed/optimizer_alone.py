"""The optimizer step replayed alone, on fake parameters and gradients of the model's shapes, dtypes and order.

The optimizer implementation (fused, foreach, for-loop) changes only the optimizer step, and the step sees nothing but
the parameters, their gradients and its own state. So "What fits" replays the forward and backward once per batch and
takes each implementation's step from this replay: what it adds on what is alive before it (`optimizer_extras`, for
the allocated peak) and its allocation events (`step_events`), spliced into a whole run's trace in place of another
implementation's steps (`spliced_trace`, for the allocator's rules). Both are tested equal to the whole run's replay
of that implementation. Not for GradScaler's steps (amp_fp16: unscale_ reads the whole run) or bitsandbytes'
optimizers (paged state): `splices` says where the splice holds."""

from __future__ import annotations

import contextlib

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from ..core.config import ExperimentConfig
from ..core.finetune import BNB_OPTIMIZERS, PAGED_OPTIMIZERS
from ..estimate import bnb_quirks, quirks
from ..estimate.fast_replay import fast_replay
from ..estimate.replay import own_model_replay, replay_tracker
from ..training.models import build_model, spec_for
from ..training.strategies import make_optimizer


def parameter_shapes(cfg: ExperimentConfig) -> list[tuple[torch.Size, torch.dtype]]:
    """The model's parameters' shapes and dtypes, in order, from a build on fake tensors: the same for every optimizer
    implementation, so what-fits builds a (7-billion-parameter) model once per precision, not once per implementation."""
    spec = spec_for(cfg)
    with FakeTensorMode(allow_non_fake_inputs=True):
        with own_model_replay(spec):
            model = build_model(cfg, torch.device("cpu"), spec)
        # What the optimizer is given: the parameters that train (LoRA's adapters, not the frozen base weights).
        return [(p.shape, p.dtype) for p in model.parameters() if p.requires_grad]


def _alone(cfg: ExperimentConfig, block: int, shapes: list | None, steps: int, transients=None):
    """([what step s adds on what is alive before it], [step s's allocation events]) for `steps` steps."""
    shapes = shapes if shapes is not None else parameter_shapes(cfg)
    with FakeTensorMode(allow_non_fake_inputs=True):
        params = [torch.nn.Parameter(torch.empty(shape, dtype=dtype)) for shape, dtype in shapes]
        tracker, log, _ = replay_tracker(block, transients)
        paged = block > 1 and cfg.optimizer in PAGED_OPTIMIZERS
        with tracker, quirks.every_model(), bnb_quirks.paged_state(tracker) if paged else contextlib.nullcontext():
            for p in params:
                p.grad = torch.empty_like(p)
                tracker.track(p, "parameters")
                tracker.track(p.grad, "gradients")
            optimizer = make_optimizer(cfg, params)
            extras, events = [], []
            for _ in range(steps):
                before, start = tracker.current, len(log.events)
                tracker.begin_phase("optimizer_step")
                optimizer.step()
                extras.append(tracker.phase_peak - before)
                events.append([e for e in log.events[start:] if e[0] != "mark"])
    return extras, events


def _kept(cfg: ExperimentConfig, block: int, shapes: list | None, steps: int, transients, memo: dict | None):
    """_alone's answer, once per optimizer and model in `memo` (a search's cache): the allocated peak's search and
    the allocator's splice ask the same replay of it. What the step does not see (the batch, checkpointing,
    accumulation, offloading) is not in the key."""
    if memo is None:
        return _alone(cfg, block, shapes, steps, transients)
    skip = ("batch", "accum", "checkpoint", "checkpoint_every", "offload_activations")
    levers = tuple(sorted((k, str(v)) for k, v in cfg.to_dict().items() if k not in skip))
    key = ("alone", block, steps, tuple(sorted((transients or {}).items())), levers)
    if key not in memo:
        memo[key] = _alone(cfg, block, shapes, steps, transients)
    return memo[key]


def optimizer_extras(cfg: ExperimentConfig, block: int, shapes: list | None = None, memo: dict | None = None) -> list:
    """What each of two optimizer steps adds on what is alive before it (the state made in step 1, temporaries), on
    fake parameters and gradients of the model's shapes, dtypes and order (`shapes`, from `parameter_shapes`, where
    the caller has them). GradScaler's unscale_ (amp_fp16) runs in the step too: the whole run's replay there.
    `memo`: a search's cache (`_kept`)."""
    if cfg.precision == "amp_fp16":
        rows = fast_replay(cfg.replace(batch=1, accum=1, checkpoint="none"), block=block)["phases"]
        return [
            p["peak_bytes"] - rows[i - 1]["allocated_bytes"]
            for i, p in enumerate(rows)
            if p["phase"] == "optimizer_step"
        ]
    return _kept(cfg, block, shapes, 2, None, memo)[0]


def splices(cfg: ExperimentConfig) -> bool:
    """Whether cfg's optimizer steps can be replayed alone and spliced into another implementation's trace."""
    return cfg.precision != "amp_fp16" and cfg.optimizer not in BNB_OPTIMIZERS and cfg.accum == 1


def step_events(
    cfg: ExperimentConfig, block: int, shapes: list | None, steps: int, transients=None, memo: dict | None = None
) -> list[list]:
    """Each optimizer step's allocation events, ("alloc", key, bytes) / ("free", key, 0), keys of their own."""
    events = _kept(cfg, block, shapes, steps, transients, memo)[1]
    return [[(kind, ("step", key), n) for kind, key, n in step] for step in events]


def spliced_trace(events: list, step_phases: list[int], steps: list[list]) -> list:
    """A whole run's trace (`events`, with ("mark", i, 0) where phase i - 1 ends) with the events of its optimizer
    steps (the phases `step_phases`) replaced by `steps`, another implementation's. The replaced steps' storages that
    a later phase frees (the state, at the run's end) are freed there as the spliced steps' are."""
    if len(step_phases) != len(steps):
        raise ValueError(f"steps: {len(steps)} given for {len(step_phases)} optimizer steps")
    out, dropped, phase, freed = [], set(), 0, False
    at = {p: i for i, p in enumerate(step_phases)}
    for event in events:
        kind, key, _ = event
        if kind == "mark":  # the end of phase key - 1 (the recorder counts from 1)
            if phase in at:
                out.extend(steps[at[phase]])
            out.append(event)
            phase = key
            continue
        if phase in at:
            if kind == "alloc":
                dropped.add(key)
            else:
                dropped.discard(key)
            continue
        if kind == "free" and key in dropped:  # the run's end frees the state: the spliced state instead, once
            dropped.discard(key)
            if not freed:
                out.extend(("free", k, 0) for k in _live(steps))
                freed = True
            continue
        dropped.discard(key)  # a key made again is another storage
        out.append(event)
    return out


def _live(steps: list[list]) -> list:
    """The storages the spliced steps leave alive (the optimizer's state), in the order they were made."""
    live = {}
    for step in steps:
        for kind, key, _ in step:
            if kind == "alloc":
                live[key] = True
            else:
                live.pop(key, None)
    return list(live)
