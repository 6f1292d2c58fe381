"""The memory estimate per rank of a data-parallel run, and "what fits": the fewest devices and the cheapest strategy.

    ddp           the single-device replay of the per-rank configuration (experiments/estimate/replay.py: the real
                  training step on fake tensors), plus DDP's gradient buckets: a second copy of the gradients
                  (bucket_cap_mb=25). A DDP rank runs exactly the single device's step on its slice of the batch.
    ddp_zero1     the same, but the optimizer steps only this rank's share of the parameters (whole tensors,
                  largest first, to the least-loaded rank): its state and its step's temporaries come from that
                  optimizer step replayed on fake tensors of the share, in ZeroRedundancyOptimizer's order.
    fsdp2_*       FSDP2's own rank code replayed on fake tensors with a fake process group
                  (experiments/distributed/replay.py); under CPU offload what lives in host memory is left out of
                  the device's peak and counted apart (`host_categories`: the rank's shards of the model states).

DDP's C++ reducer does not run on fake tensors, which is why DDP is the single device plus its buckets rather
than a replay of its own. The ZeRO paper's per-rank model states for mixed-precision Adam (2 + 2 + 12 bytes per
parameter Ψ) are shown beside the estimate: 16Ψ (DDP), 4Ψ + 12Ψ/N (stage 1), 2Ψ + 14Ψ/N (stage 2), 16Ψ/N
(stage 3); and the same stages for what this configuration trains with (fp32 Adam: 4 + 4 + 8 bytes). Activations
are never divided: every rank runs the whole model on its own slice of the batch.

Traffic per rank and step, in parameter-sized units Ψ (ring collectives move (N - 1)/N of that): DDP all-reduces
the gradients (2Ψ); ZeRO-1 as torch runs it (DDP + ZeroRedundancyOptimizer) all-reduces them too, then every rank
broadcasts the parameters it updated (+Ψ: 3Ψ, not the paper's 2Ψ, which reduce-scatters instead); FSDP2
all-gathers every block before its forward (and under ZeRO-3 again before its backward) and reduce-scatters the
gradients. With accumulation FSDP2 gathers again in every micro-batch (it reshards after each backward) and
reduces on the last; DDP and ZeRO-1 communicate once per step.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from ..core.config import ConfigError, DistributedConfig, ExperimentConfig
from ..core.vocabulary import RANK_TENSOR_CATEGORIES, TRAINING_PHASES
from ..estimate.estimator import allocator_peak, estimate
from ..estimate.explain import step_temporaries
from ..estimate.replay import own_model_replay, replay
from ..estimate.workspaces import missing
from ..measure.tracker import MemoryTracker
from ..training.models import build_model, spec_for
from ..training.strategies import make_optimizer
from .replay import replay_rank


def traffic_units(strategy: str, accum: int = 1) -> int:
    """Per-rank traffic of one step in Ψ (the model's parameter bytes), before the ring's (N - 1)/N."""
    if strategy == "ddp":
        return 2  # all-reduce of the gradients
    if strategy == "ddp_zero1":
        return 3  # the same all-reduce, then each rank broadcasts the parameters it stepped
    gathers = accum if strategy == "fsdp2_zero2" else 2 * accum  # ZeRO-3 gathers again for the backward
    return gathers + 1  # and one reduce-scatter of the gradients


def traffic_bytes(strategy: str, parameter_bytes: int, n: int, accum: int = 1) -> float:
    return traffic_units(strategy, accum) * parameter_bytes * (n - 1) / n


def strategy_order(accum: int = 1) -> tuple[str, ...]:
    """The strategies by their traffic, least first (ties: the simpler one first); CPU offload comes last whatever
    its traffic, because it also copies every shard across PCIe and runs the optimizer step on the CPU."""
    return tuple(
        sorted(
            ("ddp", "ddp_zero1", "fsdp2_zero2", "fsdp2_zero3", "fsdp2_offload"),
            key=lambda s: (s == "fsdp2_offload", traffic_units(s, accum)),
        )
    )


STRATEGY_ORDER = strategy_order()


@functools.lru_cache(maxsize=8)
def _param_shapes(cfg: ExperimentConfig) -> tuple[list[list[tuple[int, ...]]], list[tuple[int, ...]], int]:
    """(shapes per block, shapes of the root's own parameters, bytes per element), from the model on meta: the
    blocks its spec names (FSDP2 shards each) and what is left of the model's parameters. Kept for the next world
    size or strategy of the same configuration (what_fits asks for several); read, never changed."""
    spec = spec_for(cfg)
    if cfg.model_source:
        # A model of one's own may read values while it initialises (trunc_normal_): a fake build, neutralised.
        with FakeTensorMode(allow_non_fake_inputs=True), own_model_replay(spec):
            model = build_model(cfg, torch.device("cpu"), spec)
    else:
        model = build_model(cfg, torch.device("meta"), spec)
    blocks = [list(b.parameters()) for b in spec.blocks(model)]
    in_blocks = {id(p) for b in blocks for p in b}
    root = [tuple(p.shape) for p in model.parameters() if id(p) not in in_blocks]
    return [[tuple(p.shape) for p in b] for b in blocks], root, 2 if cfg.precision == "bf16" else 4


def _numel(shape) -> int:
    return math.prod(shape) if shape else 1


def zero1_partition(shapes: list[tuple[int, ...]], n: int) -> list[list[int]]:
    """ZeroRedundancyOptimizer's assignment: largest tensor first, each to the rank with the fewest elements."""
    order = sorted(range(len(shapes)), key=lambda i: _numel(shapes[i]), reverse=True)
    sizes, ranks = [0] * n, [[] for _ in range(n)]
    for i in order:
        r = sizes.index(min(sizes))
        ranks[r].append(i)
        sizes[r] += _numel(shapes[i])
    return ranks


def optimizer_step_bytes(
    cfg: ExperimentConfig, shapes: list[tuple[int, ...]], pe: int, block: int = 1
) -> tuple[int, int]:
    """(state, temporaries) of the optimizer's second step over parameters of `shapes`, in that order, on fake
    tensors: the for-loop implementations keep one tensor's temporaries while making the next one's."""
    if not shapes:  # a ZeRO-1 rank beyond the number of tensors steps nothing
        return 0, 0
    with FakeTensorMode():
        params = [
            torch.nn.Parameter(torch.empty(s, dtype=torch.bfloat16 if pe == 2 else torch.float32)) for s in shapes
        ]
        for p in params:
            p.grad = torch.empty_like(p)
        optimizer = make_optimizer(cfg, params)
        tracker = MemoryTracker(block=block)
        with tracker:
            for p in params:  # counted from here, so that an in-place update is not their first sighting
                tracker.track(p, "parameters")
                tracker.track(p.grad, "gradients")
            held = tracker.current
            optimizer.step()
            state = tracker.current
            tracker.peak = state
            optimizer.step()
    return state - held, tracker.peak - state


def _single(cfg: ExperimentConfig, block: int, transients: dict[str, tuple[int, ...]] | None = None) -> dict:
    """The single-device replay of the per-rank configuration, reduced to the figures the strategies move.
    `transients`: scratch allocations per op signature measured on the GPU (experiments/estimate/workspaces.py). The same
    for every world size and strategy of one per-rank configuration: replayed once (read, never changed)."""
    return _single_replay(cfg, block, tuple(sorted(transients.items())) if transients else None)


@functools.lru_cache(maxsize=8)
def _single_replay(cfg: ExperimentConfig, block: int, transients: tuple | None) -> dict:
    r = replay(cfg, block=block, transients=dict(transients) if transients else None)
    rows = r["phases"]
    step2 = [p for p in rows if p["step"] == 2]
    step_peak = max(p["peak_bytes"] for p in step2 if p["phase"] == "optimizer_step")
    steady = r["steady"]
    in_step = r["peak_phase"] == "optimizer_step"
    blocks = max(0, allocator_peak(r)[0] - int(r["peak_bytes"]))
    return {
        "params": next(p["allocated_bytes"] for p in rows if p["phase"] == "model"),
        "grads": steady.get("gradients", 0),
        "state": steady.get("optimizer_state", 0),
        "data": steady.get("data", 0),
        "step_temporaries": step_temporaries(r),
        "step_peak": step_peak,
        "train_peak": max(p["peak_bytes"] for p in step2 if p["phase"] in TRAINING_PHASES),
        # What is alive at the forward/backward peak: the replay's peak when that is where it is.
        "train_categories": {} if in_step else r["categories"],
        # The caching allocator's whole blocks beyond the storages (the peaks above already hold the kernels'
        # scratch memory): on CUDA every rank runs the same ops on the same shapes.
        "blocks": blocks,
        "peak_bytes": int(r["peak_bytes"]) + blocks,
    }


def _zero1_share(single: dict, cfg: ExperimentConfig, shapes, n: int, pe: int, block: int) -> tuple[int, int]:
    """(state, step temporaries) of the ZeRO-1 rank that holds the most. What else the step holds (a GradScaler's
    buffers) stays as the single device has it."""
    S, T = single["state"], single["step_temporaries"]
    S_all, T_all = optimizer_step_bytes(cfg, shapes, pe, block)
    ranks = [optimizer_step_bytes(cfg, [shapes[i] for i in mine], pe, block) for mine in zero1_partition(shapes, n)]
    ranks = [(S - S_all + s, T - T_all + t) for s, t in ranks]
    return max(ranks, key=lambda st: max(single["train_peak"] + st[0], single["step_peak"] + st[0] + st[1] - T))


def estimate_sharded(dcfg, device_type: str = "cpu", transients: dict[str, tuple[int, ...]] | None = None) -> dict:
    """Per-rank peak of `dcfg` (a distributed.DistributedConfig), its categories, and the paper's terms."""
    if device_type == "cuda" and dcfg.config.optimizer_impl == "default" and dcfg.config.optimizer != "sgd":
        # torch's default for parameters that are all on CUDA (the replays' fake tensors are CPU tensors)
        dcfg = dataclasses.replace(dcfg, config=dcfg.config.replace(optimizer_impl="foreach"))
    cfg, n, strategy = dcfg.rank_config, dcfg.world_size, dcfg.strategy
    block = 512 if device_type == "cuda" else 1
    single = _single(cfg, block, transients if device_type == "cuda" else None)
    blocks, root, pe = _param_shapes(cfg)
    shapes = [s for b in blocks for s in b] + root
    full = sum(_numel(s) for s in shapes) * pe
    if strategy in REPLAYED:
        return _replayed(dcfg, device_type, transients, single, full, pe)
    P, G, S, T = single["params"], single["grads"], single["state"], single["step_temporaries"]
    # A DDP rank runs the single device's step on its slice, plus the buckets: so its forward, backward and
    # optimizer-step peaks are the replay's, plus a gradient-sized copy. ZeRO-1's rank steps only its share of
    # the parameters, in ZeroRedundancyOptimizer's order (largest first), which sets the step's temporaries.
    buckets = G or P
    S_r, T_r = S, T
    if strategy == "ddp_zero1":
        S_r, T_r = _zero1_share(single, cfg, shapes, n, pe, block)
    train = single["train_peak"] - (S - S_r) + buckets
    step = single["step_peak"] - (S - S_r) - (T - T_r) + buckets
    cats = dict.fromkeys(RANK_TENSOR_CATEGORIES, 0)
    cats.update(parameters=P, optimizer_state=S_r, communication=buckets, data=single["data"])
    if step >= train:
        cats.update(gradients=G, temporaries=T_r)
    else:
        at = single["train_categories"]
        cats.update({k: at.get(k, 0) for k in ("gradients", "activations", "temporaries", "autocast_copies")})
    peak = max(train, step)
    high = peak
    if device_type == "cuda":
        peak += single["blocks"]
        cats["other"] = max(0, peak - sum(cats.values()))  # scratch memory and whole blocks
        # NCCL reads a bucket on its own stream: the gradients' copy is freed only when that stream is done,
        # so whether it is still allocated at the peak depends on timing (docs/gpu-results.md).
        high = peak + buckets
    return {
        "strategy": strategy,
        "world_size": n,
        "peak_bytes": int(peak),
        "peak_high_bytes": int(high),
        "categories": {k: int(v) for k, v in cats.items()},
        "single_device_peak_bytes": single["peak_bytes"],
        "parameter_bytes": P,
        "communication": {
            "per_step_bytes": traffic_bytes(strategy, full, n),
            "collective": "all-reduce of the gradients"
            + (", then a broadcast of each rank's updated parameters" if strategy == "ddp_zero1" else ""),
        },
        "zero_paper": zero_paper_bytes(full // pe, n),
        "zero_this_run": zero_run_bytes(cfg, full // pe, n),
        "method": "single-device replay + DDP's buckets",
        "device_type": device_type,
    }


def _replayed(dcfg, device_type: str, transients, single: dict, full: int, pe: int) -> dict:
    """FSDP2 per rank from FSDP2 itself on fake tensors (experiments/distributed/replay.py)."""
    cuda = device_type == "cuda"
    r = replay_rank(dcfg, block=512 if cuda else 1, transients=transients if cuda else None)
    peak = r["allocator_peak_bytes"] if cuda else r["peak_bytes"]
    cats = {k: v for k, v in r["categories"].items() if k in RANK_TENSOR_CATEGORIES}
    if cuda:
        cats["other"] = max(0, peak - sum(cats.values()))  # whole blocks and scratch memory, as on one device
    n = dcfg.world_size
    comm = {
        "per_step_bytes": traffic_bytes(dcfg.strategy, full, n, dcfg.config.accum),
        "collective": "all-gather of the parameters (twice under ZeRO-3) and reduce-scatter of the gradients",
    }
    unmeasured = missing(r["signatures"], transients) if cuda else []
    host = {"host_categories": offload_host_categories(dcfg)} if dcfg.strategy == "fsdp2_offload" else {}
    return {
        "strategy": dcfg.strategy,
        "world_size": n,
        "peak_bytes": int(peak),
        "peak_phase": r["peak_phase"],
        "categories": {k: int(v) for k, v in cats.items()},
        **host,
        "single_device_peak_bytes": single["peak_bytes"],
        "parameter_bytes": single["params"],
        "communication": comm,
        "zero_paper": zero_paper_bytes(full // pe, n),
        "zero_this_run": zero_run_bytes(dcfg.config, full // pe, n),
        "signatures": r["signatures"],
        "unmeasured": unmeasured,
        "method": "FSDP2 replayed on fake tensors",
        "device_type": device_type,
    }


def offload_host_categories(dcfg) -> dict[str, int]:
    """What a rank under FSDP2's CPUOffloadPolicy keeps in host memory: exactly what a ZeRO-3 rank keeps on its
    device after a step, its shards of the parameters, their gradients and the optimizer state. FSDP2 shards each
    parameter along its first dimension, padded to the world size, so rank 0 holds the largest shards; Adam adds
    a 4-byte step counter per parameter tensor."""
    cfg, n = dcfg.rank_config, dcfg.world_size
    blocks, root, pe = _param_shapes(cfg)
    shapes = [s for b in blocks for s in b] + root
    shard = sum(math.ceil(s[0] / n) * _numel(s[1:]) if s else 1 for s in shapes) * pe
    counters = 4 * len(shapes) if cfg.optimizer in ("adam", "adamw") else 0
    return {"parameters": shard, "gradients": shard, "optimizer_state": STATE_TENSORS[cfg.optimizer] * shard + counters}


REPLAYED = ("fsdp2_zero2", "fsdp2_zero3", "fsdp2_offload")


def zero_stage_bytes(psi: int, n: int, param: int, grad: int, state: int) -> dict:
    """Model states per rank at each ZeRO stage, from the bytes per parameter of each (Ψ parameters, N ranks)."""
    return {
        "ddp": (param + grad + state) * psi,
        "zero1": (param + grad) * psi + state * psi / n,
        "zero2": param * psi + (grad + state) * psi / n,
        "zero3": (param + grad + state) * psi / n,
    }


def zero_paper_bytes(psi: int, n: int) -> dict:
    """The ZeRO paper's model states per rank for mixed-precision Adam: 2 + 2 + 12 bytes (K = 12)."""
    return zero_stage_bytes(psi, n, 2, 2, 12)


STATE_TENSORS = {"sgd": 0, "sgd_momentum": 1, "adam": 2, "adamw": 2}  # state tensors per parameter


def zero_run_bytes(cfg: ExperimentConfig, psi: int, n: int) -> dict:
    """The same stages for what this configuration trains with: fp32 parameters, gradients and state unless it is
    pure bf16 (AMP keeps all three in fp32; lesson 3)."""
    pe = 2 if cfg.precision == "bf16" else 4
    return zero_stage_bytes(psi, n, pe, pe, STATE_TENSORS[cfg.optimizer] * pe)


def what_fits(
    config: dict,
    capacity_bytes: int,
    max_world_size: int = 8,
    device_type: str = "cuda",
    batch_mode: str = "per_rank",
    transients: dict[str, tuple[int, ...]] | None = None,
) -> dict | None:
    """The smallest world size, then the strategy with the least traffic (strategy_order), whose per-rank estimate fits
    (the top of its range, where it has one). A strategy's per-rank memory does not grow with the world size (its
    shards shrink, and so does the per-rank batch when the global batch is fixed), so each strategy's smallest
    fitting world size is found from the fewest ranks, the most, then bisection: one replay where two ranks fit, two
    where a strategy fits nowhere, about four otherwise, instead of one per world size."""
    cfg = ExperimentConfig.from_dict(config)
    single = estimate(cfg, device_type=device_type, transients=transients)["peak_bytes"]
    if single <= capacity_bytes:
        return {"world_size": 1, "strategy": "single", "peak_bytes": single}

    def plan(strategy: str, n: int):
        try:
            return DistributedConfig(cfg, strategy=strategy, world_size=n, batch_mode=batch_mode)
        except ConfigError:
            return None  # e.g. a global batch that n ranks cannot split evenly

    best = None
    for strategy in strategy_order(cfg.accum):
        if strategy == "fsdp2_offload" and device_type != "cuda":
            continue
        limit = best["world_size"] - 1 if best else max_world_size  # a later strategy wins only with fewer ranks
        sizes = [(n, d) for n in range(2, limit + 1) if (d := plan(strategy, n)) is not None]

        def fits(i: int, strategy=strategy, sizes=sizes) -> bool:
            nonlocal best
            est = estimate_sharded(sizes[i][1], device_type, transients)
            top = est.get("peak_high_bytes") or est["peak_bytes"]
            if top <= capacity_bytes and (best is None or sizes[i][0] < best["world_size"]):
                best = {"world_size": sizes[i][0], "strategy": strategy, "peak_bytes": est["peak_bytes"]}
                best["peak_high_bytes"] = top
            return top <= capacity_bytes

        # The fewest ranks first (a model just over one GPU fits on two), then the most: if it does not fit there it
        # fits nowhere; then bisection between.
        if not sizes or fits(0) or len(sizes) == 1 or not fits(len(sizes) - 1):
            continue
        lo, hi = 1, len(sizes) - 2
        while lo <= hi:
            mid = (lo + hi) // 2
            if fits(mid):
                hi = mid - 1
            else:
                lo = mid + 1
    return best
