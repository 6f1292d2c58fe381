"""The memory estimate per rank of a data-parallel run, and "what fits": the fewest devices and the cheapest strategy.

Built on the single-device replay of the per-rank configuration (experiments/replay.py: the real training step
on fake tensors), which gives parameters P, gradients G, optimizer state S, the activations and the optimizer
step's temporaries. Then each strategy keeps what it actually keeps on a rank:

    ddp           P + G + S + activations, plus the gradient buckets (a second copy of G, bucket_cap_mb=25)
    ddp_zero1     P + G + S_r + buckets, S_r = the state of the parameters ZeroRedundancyOptimizer gives this
                  rank (whole tensors, largest first, to the least-loaded rank)
    fsdp2_zero2   P/N + G/N + S/N + activations, plus every block's gathered parameters between forward and
                  backward (reshard_after_forward=False)
    fsdp2_zero3   P/N + G/N + S/N + activations, plus two blocks' gathered parameters (the one running and the
                  one prefetched) and one block's flat all-gather / reduce-scatter buffer
    fsdp2_offload the gathered blocks and the activations; shards, gradients and state live in host memory

FSDP2 shards every tensor along dim 0 into N padded chunks, so "/N" is ceil(rows / N) rows per tensor. The
ZeRO paper's per-rank model states for mixed-precision Adam (2 + 2 + 12 bytes per parameter Ψ) are the same
terms: 16Ψ (DDP), 4Ψ + 12Ψ/N (stage 1), 2Ψ + 14Ψ/N (stage 2), 16Ψ/N (stage 3). Activations are never divided:
every rank runs the whole model on its own slice of the batch.
"""

from __future__ import annotations

import dataclasses
import math

from .config import ExperimentConfig
from .models import build_model

STRATEGY_ORDER = ("ddp", "ddp_zero1", "fsdp2_zero2", "fsdp2_zero3", "fsdp2_offload")  # least communication first
MIB = 2**20


def _param_shapes(cfg: ExperimentConfig) -> tuple[list[list[tuple[int, ...]]], list[tuple[int, ...]], int]:
    """(shapes per block, shapes of the root's own parameters, bytes per element), from the model on meta."""
    import torch

    model = build_model(cfg, torch.device("meta"))
    blocks = [[tuple(p.shape) for p in b.parameters()] for b in model.blocks]
    root = [tuple(p.shape) for p in model.head.parameters()]
    return blocks, root, 2 if cfg.precision == "bf16" else 4


def _numel(shape) -> int:
    return math.prod(shape) if shape else 1


def _shard_numel(shape, n: int) -> int:
    """Elements of one rank's padded dim-0 chunk (FSDP2's sharded storage)."""
    if not shape:
        return 1
    return math.ceil(shape[0] / n) * _numel(shape[1:])


def zero1_partition(shapes: list[tuple[int, ...]], n: int) -> list[list[int]]:
    """ZeroRedundancyOptimizer's assignment: largest tensor first, each to the rank with the fewest elements."""
    order = sorted(range(len(shapes)), key=lambda i: _numel(shapes[i]), reverse=True)
    sizes, ranks = [0] * n, [[] for _ in range(n)]
    for i in order:
        r = sizes.index(min(sizes))
        ranks[r].append(i)
        sizes[r] += _numel(shapes[i])
    return ranks


def _single(cfg: ExperimentConfig, block: int, transients: dict[str, int] | None = None) -> dict:
    """The single-device replay of the per-rank configuration, reduced to the figures the strategies move.
    `transients`: scratch bytes per op signature measured on the GPU (experiments/op_workspace.py)."""
    from .estimator import allocator_peak
    from .replay import replay

    r = replay(cfg, block=block, transients=transients)
    rows = r["phases"]
    params = next(p["allocated_bytes"] for p in rows if p["phase"] == "model")
    step2 = [p for p in rows if p["step"] == 2]
    before_step = [p for p in step2 if p["phase"] != "optimizer_step"][-1]["allocated_bytes"]
    opt_peak = max(p["peak_bytes"] for p in step2 if p["phase"] == "optimizer_step")
    fwd = max(p["peak_bytes"] for p in step2 if p["phase"] == "forward")
    bwd = max(p["peak_bytes"] for p in step2 if p["phase"] == "backward")
    steady = r["steady"]
    state, grads, data = steady.get("optimizer_state", 0), steady.get("gradients", 0), steady.get("data", 0)
    zero = next(p["allocated_bytes"] for p in step2 if p["phase"] == "zero_grad")
    return {
        "params": params, "grads": grads, "state": state, "data": data,
        "step_temporaries": max(0, opt_peak - before_step),
        # What forward and backward hold beyond the model states: activations, and in backward the gradient
        # of everything before the peak. Counted without G: a sharded rank keeps only its shard of it.
        "activations": max(fwd - zero, bwd - zero - grads, 0),
        "grads_at_start": zero - params - state - data,  # gradients kept from the step before (zero_grad_keep)
        "peak_bytes": int(r["peak_bytes"]), "replay_categories": r["categories"],
        # Beyond tensors, as the single device's estimate counts it (whole allocator blocks, kernels' scratch
        # memory): on CUDA every rank runs the same ops on the same shapes.
        "other": max(0, allocator_peak(r)[0] - sum(r["categories"].values())),
    }


def estimate_sharded(dcfg, device_type: str = "cpu", transients: dict[str, int] | None = None) -> dict:
    """Per-rank peak of `dcfg` (a distributed.DistributedConfig), its categories, and the paper's terms."""
    if device_type == "cuda" and dcfg.config.optimizer_impl == "default" and dcfg.config.optimizer != "sgd":
        # torch's default for parameters that are all on CUDA (the replays' fake tensors are CPU tensors)
        dcfg = dataclasses.replace(dcfg, config=dcfg.config.replace(optimizer_impl="foreach"))
    cfg, n, strategy = dcfg.rank_config, dcfg.world_size, dcfg.strategy
    block = 512 if device_type == "cuda" else 1
    single = _single(cfg, block, transients if device_type == "cuda" else None)
    # The for-loop implementation's temporaries are those of its largest tensor, however few tensors a rank has.
    per_tensor = cfg.optimizer_impl == "for-loop" or (cfg.optimizer_impl == "default" and device_type != "cuda")
    blocks, root, pe = _param_shapes(cfg)
    shapes = [s for b in blocks for s in b] + root
    full = sum(_numel(s) for s in shapes) * pe
    shard = sum(_shard_numel(s, n) for s in shapes) * pe
    fraction = shard / full if full else 1.0
    P, G, S, A = single["params"], single["grads"], single["state"], single["activations"]
    T = single["step_temporaries"]
    gathered_pe = 2 if cfg.precision in ("amp_fp16", "amp_bf16") else pe  # FSDP2's param_dtype under AMP
    block_bytes = [sum(_numel(s) for s in b) * gathered_pe for b in blocks] or [0]
    biggest = max(block_bytes)
    cats = dict.fromkeys(("parameters", "gradients", "optimizer_state", "activations", "temporaries",
                          "communication", "data"), 0)
    cats["data"] = single["data"]
    if strategy in ("ddp", "ddp_zero1"):
        buckets = G or P
        if strategy == "ddp_zero1":
            mine = zero1_partition(shapes, n)[0]
            share = sum(_numel(shapes[i]) for i in mine) * pe / full if full else 1.0
            S_r, T_r = int(S * share), T if per_tensor else int(T * share)
        else:
            S_r, T_r = S, T
        train = P + S_r + buckets + single["grads_at_start"] + A
        step = P + G + S_r + buckets + T_r
        cats.update(parameters=P, optimizer_state=S_r, communication=buckets)
        if step >= train:
            cats.update(gradients=G, temporaries=T_r)
        else:
            cats.update(activations=A, gradients=single["grads_at_start"])
        comm = {"per_step_bytes": 2 * G * (n - 1) / n, "collective": "all-reduce of the gradients"}
    elif strategy in REPLAYED:
        return _replayed(dcfg, device_type, transients, single, full, pe, P, G, S, A)
    else:
        P_r, G_r, S_r, T_r = int(P * fraction), int(G * fraction), int(S * fraction), int(T * fraction)
        if strategy == "fsdp2_offload":
            P_r = G_r = S_r = T_r = 0  # on the host
        # zero2: every block stays gathered from its forward to its backward; zero3: the block running, the one
        # prefetched and a flat buffer. Plus one block's unsharded gradient before its reduce-scatter.
        gathered = sum(block_bytes) if strategy == "fsdp2_zero2" else 3 * biggest
        train = P_r + S_r + G_r + A + gathered + biggest
        step = P_r + G_r + S_r + T_r
        cats.update(parameters=P_r, optimizer_state=S_r, gradients=G_r)
        if step >= train - G_r:
            cats["temporaries"] = T_r
        else:
            cats.update(activations=A, communication=gathered + biggest)
        comm = _fsdp_communication(strategy, full, n)
    peak = max(train, step) + single["data"]
    high = peak
    if device_type == "cuda":
        cats["other"] = single["other"]
        peak += cats["other"]
        if strategy in ("ddp", "ddp_zero1"):
            # NCCL reads a bucket on its own stream: the gradients' copy is freed only when that stream is done,
            # so whether it is still allocated at the peak depends on timing (docs/gpu-results.md).
            high = peak + (G or P)
    return {
        "strategy": strategy, "world_size": n, "peak_bytes": int(peak), "peak_high_bytes": int(max(high, peak)),
        "categories": {k: int(v) for k, v in cats.items()},
        "single_device_peak_bytes": single["peak_bytes"], "parameter_bytes": P, "gradient_bytes": G,
        "optimizer_state_bytes": S, "activation_bytes": A, "shard_fraction": fraction,
        "communication": comm, "zero_paper": zero_paper_bytes(full // pe, n),
        "method": "single-device replay + sharding model", "device_type": device_type,
    }


def _replayed(dcfg, device_type: str, transients, single: dict, full: int, pe: int, P: int, G: int, S: int,
              A: int) -> dict:
    """FSDP2's ZeRO-2 and ZeRO-3 per rank from FSDP2 itself on fake tensors (experiments/sharded_replay.py)."""
    from .sharded_replay import replay_rank

    cuda = device_type == "cuda"
    r = replay_rank(dcfg, block=512 if cuda else 1, transients=transients if cuda else None)
    peak = r["allocator_peak_bytes"] if cuda else r["peak_bytes"]
    cats = {k: v for k, v in r["categories"].items() if k in CATEGORY_ORDER}
    if cuda:
        cats["other"] = max(0, peak - sum(cats.values()))  # whole blocks and scratch memory, as on one device
    n = dcfg.world_size
    comm = _fsdp_communication(dcfg.strategy, full, n)
    unmeasured = [sig for sig in r["signatures"] if cuda and sig not in (transients or {})]
    return {
        "strategy": dcfg.strategy, "world_size": n, "peak_bytes": int(peak), "peak_phase": r["peak_phase"],
        "categories": {k: int(v) for k, v in cats.items()},
        "single_device_peak_bytes": single["peak_bytes"], "parameter_bytes": P, "gradient_bytes": G,
        "optimizer_state_bytes": S, "activation_bytes": A, "shard_fraction": None, "communication": comm,
        "zero_paper": zero_paper_bytes(full // pe, n), "signatures": r["signatures"], "unmeasured": unmeasured,
        "method": "FSDP2 replayed on fake tensors", "device_type": device_type,
    }


def _fsdp_communication(strategy: str, full: int, n: int) -> dict:
    return {"per_step_bytes": (3 if strategy != "fsdp2_zero2" else 2) * full * (n - 1) / n,
            "collective": "all-gather of the parameters (twice under ZeRO-3) and reduce-scatter of the gradients"}


CATEGORY_ORDER = ("parameters", "gradients", "optimizer_state", "activations", "temporaries", "autocast_copies",
                  "communication", "data")
REPLAYED = ("fsdp2_zero2", "fsdp2_zero3")


def zero_paper_bytes(psi: int, n: int) -> dict:
    """The ZeRO paper's model states per rank for mixed-precision Adam (K = 12): Ψ parameters, N ranks."""
    return {"ddp": 16 * psi, "zero1": 4 * psi + 12 * psi / n, "zero2": 2 * psi + 14 * psi / n, "zero3": 16 * psi / n}


def what_fits(config: dict, capacity_bytes: int, max_world_size: int = 8, device_type: str = "cuda",
              batch_mode: str = "per_rank") -> dict | None:
    """The smallest world size, then the strategy with the least communication, whose per-rank estimate fits."""
    from .config import ConfigError
    from .distributed import DistributedConfig
    from .estimator import estimate

    cfg = ExperimentConfig.from_dict(config)
    if estimate(cfg, device_type=device_type)["peak_bytes"] <= capacity_bytes:
        return {"world_size": 1, "strategy": "single", "peak_bytes": estimate(cfg, device_type=device_type)["peak_bytes"]}
    for n in range(2, max_world_size + 1):
        for strategy in STRATEGY_ORDER:
            if strategy == "fsdp2_offload" and device_type != "cuda":
                continue
            try:
                dcfg = DistributedConfig(cfg, strategy=strategy, world_size=n, batch_mode=batch_mode)
            except ConfigError:
                continue
            peak = estimate_sharded(dcfg, device_type)["peak_bytes"]
            if peak <= capacity_bytes:
                return {"world_size": n, "strategy": strategy, "peak_bytes": peak}
    return None
