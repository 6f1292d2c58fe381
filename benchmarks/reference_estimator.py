"""A reference for the estimate: the analytical, layer-by-layer model the engine used before its fake-tensor replay
(experiments/estimate/replay.py). Kept for benchmarks/estimate_grid.py, which reports its error beside the replay's
on the same seeded grid (docs/gpu-results.md); nothing in experiments/ uses it.

A replay of one training run's allocations, tensor by tensor, for CUDA.

Every model family is described as a chain of layers; each layer says how many bytes its
forward keeps for backward, how many it needs only briefly, and what its backward allocates.
The replay walks setup, then two steps (the first allocates the optimizer state lazily), in the
order autograd runs them, and the peak is the largest running total. Sizes are rounded the way
the CUDA caching allocator rounds them (multiples of 512 bytes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from experiments.core.config import ExperimentConfig
from experiments.core.families import CNN_CLASSES, cnn_spatial_sizes
from experiments.core.vocabulary import TENSOR_CATEGORIES as CATS


def _round(n: int) -> int:
    return 0 if n <= 0 else 512 * math.ceil(n / 512)


@dataclass
class Layer:
    params: list[int]  # element count of each parameter tensor
    out: int  # bytes of the output (kept while a later layer or the loss needs it)
    saved: int = 0  # bytes kept for backward besides input and output
    fwd_tmp: int = 0  # bytes alive only inside the forward of this layer
    bwd_tmp: int = 0  # bytes alive only inside the backward of this layer (besides the grads)
    grad_in: int = 0  # bytes of the gradient w.r.t. the input (0 when the input needs no grad)


@dataclass
class _Sim:
    cur: dict = field(default_factory=lambda: dict.fromkeys(CATS, 0))
    peak: int = 0
    peak_cats: dict = field(default_factory=dict)
    peak_phase: str = ""
    phase: str = ""

    def add(self, cat: str, n: int, transient: int = 0) -> None:
        """Allocate n bytes in cat; `transient` more bytes exist for a moment on top."""
        self.cur[cat] += n
        total = sum(self.cur.values()) + transient
        if total > self.peak:
            self.peak = total
            self.peak_cats = dict(self.cur)
            self.peak_cats["temporaries"] += transient
            self.peak_phase = self.phase

    def free(self, cat: str, n: int) -> None:
        self.cur[cat] -= n


def _layers(cfg: ExperimentConfig) -> tuple[list[Layer], Layer, int, int]:
    """(layers, head, input bytes, target bytes) at the micro-batch size."""
    amp = cfg.precision in ("amp_fp16", "amp_bf16")
    act = 2 if cfg.precision in ("amp_fp16", "amp_bf16", "bf16") else 4
    data_e = 2 if cfg.precision == "bf16" else 4
    mb, w = cfg.micro_batch, cfg.width
    layers: list[Layer] = []
    if cfg.model == "mlp":
        a = _round(mb * w * act)
        for i in range(cfg.layers):
            cast_in = _round(mb * w * 2) if (amp and i == 0) else 0  # autocast casts the fp32 input once
            layers.append(
                Layer(
                    params=[w * w, w],
                    out=a,
                    saved=cast_in,
                    fwd_tmp=0 if cfg.inplace else a,  # Linear's output before a non-in-place ReLU
                    bwd_tmp=a,  # ReLU's gradient w.r.t. the Linear output
                    grad_in=a if i else 0,
                )
            )
        x = _round(mb * w * data_e)
        # mse_loss runs in fp32 under autocast: it keeps an fp32 copy of the output.
        head = Layer(params=[], out=512, saved=_round(mb * w * 4) if amp else 0, bwd_tmp=2 * _round(mb * w * 4))
        return layers, head, x, x
    if cfg.model == "transformer":
        s, d = cfg.seq_len, w
        a = _round(mb * s * d * act)
        stats = _round(mb * s * 4)
        lse = _round(mb * cfg.heads * 32 * math.ceil(s / 32) * 4)
        for i in range(cfg.layers):
            cast_in = _round(mb * s * d * 2) if (amp and i == 0) else 0
            # ln1 out, qkv (3), attention out, residual 1, ln2 out, fc1 out (4), gelu out (4)
            saved = 15 * a + 2 * stats + lse + cast_in
            if cfg.precision == "amp_fp16" or cfg.precision == "amp_bf16":
                saved += 2 * stats  # layer norms run in fp32 under autocast: fp32 copies
            layers.append(
                Layer(
                    params=[d, d, 3 * d * d, 3 * d, d * d, d, d, d, 4 * d * d, 4 * d, 4 * d * d, d],
                    out=a,
                    saved=saved,
                    fwd_tmp=a,
                    bwd_tmp=8 * a,
                    grad_in=a,
                )
            )
        x = _round(mb * s * d * data_e)
        head = Layer(params=[d, d], out=512, saved=a + 2 * stats, bwd_tmp=3 * _round(mb * s * d * 4))
        return layers, head, x, x
    # cnn
    # cuDNN's convolution-backward workspace is not a tensor; its size depends on the algorithm
    # cuDNN picks. Calibrated on an NVIDIA H200 (docs/gpu-results.md): about 4.5x the layer's
    # output in strict fp32 (cuDNN's TF32 off; PyTorch's default lets it use TF32, and picks other
    # algorithms: the replay's measured workspaces, not this rule, follow that). In half precision a
    # smaller workspace (~37 MiB at batch 8) appears early in backward and is not modelled: those
    # estimates run about 10% low.
    ws_factor = 4.5 if act == 4 else 1.35
    c_in = 3
    for i, (size, pooled) in enumerate(cnn_spatial_sizes(cfg)):
        full = _round(mb * cfg.width * size * size * act)
        grad_in = _round(mb * c_in * size * size * act) if i else 0
        ws = int(ws_factor * full)
        if pooled != size:
            out = _round(mb * cfg.width * pooled * pooled * act)
            idx = _round(mb * cfg.width * pooled * pooled * 8)  # int64 max-pool indices
            saved = full + idx  # ReLU output (the pool's input) and the indices
            # Backward in order: pool (+grad of the ReLU output), then the pooled tensors die;
            # ReLU (+grad of the conv output), then the ReLU output dies; conv (+grad_in, workspace).
            peak = max(full, 2 * full - idx - 2 * out, grad_in + ws - idx - 2 * out)
        else:
            out, saved = full, 0
            peak = max(full, grad_in + ws - full)
        cast_in = _round(mb * 3 * cfg.image_size**2 * 2) if (amp and i == 0) else 0
        layers.append(
            Layer(
                params=[cfg.width * c_in * 9, cfg.width],
                out=out,
                saved=saved + cast_in,
                fwd_tmp=0 if cfg.inplace else full,
                bwd_tmp=max(0, peak - grad_in),
                grad_in=grad_in,
            )
        )
        c_in = cfg.width
    x = _round(mb * 3 * cfg.image_size**2 * data_e)
    head = Layer(params=[CNN_CLASSES * cfg.width, CNN_CLASSES], out=512, saved=2 * _round(mb * CNN_CLASSES * 4))
    return layers, head, x, _round(mb * 8)


def _optimizer_bytes(cfg: ExperimentConfig, params: list[int], pe: int) -> tuple[int, int, int]:
    """(state bytes, step-time temporary bytes, step counters on the device)."""
    impl = cfg.optimizer_impl if cfg.optimizer_impl != "default" else "foreach"
    sizes = [_round(n * pe) for n in params]
    total, largest = sum(sizes), max(sizes)
    if cfg.optimizer == "sgd":
        return 0, 0, 0
    if cfg.optimizer == "sgd_momentum":
        return total, 0, 0
    steps_on_device = 512 * len(params) if impl == "fused" else 0
    tmp = {"foreach": total, "for-loop": 2 * largest, "fused": 0}[impl]  # sqrt(exp_avg_sq) buffers
    return 2 * total, tmp, steps_on_device


def analytic(cfg: ExperimentConfig, capacity_bytes: int | None = None) -> dict:
    """{"categories", "steady", "peak_bytes", "peak_phase", "capacity_bytes", "fits", "method": "analytic"}."""
    layers, head, x_bytes, y_bytes = _layers(cfg)
    amp = cfg.precision in ("amp_fp16", "amp_bf16")
    pe = 2 if cfg.precision == "bf16" else 4
    all_params = [n for layer in layers + [head] for n in layer.params]
    p_bytes = [_round(n * pe) for n in all_params]
    P = sum(p_bytes)
    per_layer_p = [sum(_round(n * pe) for n in layer.params) for layer in layers]
    per_layer_cast = [sum(_round(n * 2) for n in layer.params) if amp else 0 for layer in layers]
    head_p = sum(_round(n * pe) for n in head.params)
    head_cast = sum(_round(n * 2) for n in head.params) if amp else 0
    state, opt_tmp, opt_steps = _optimizer_bytes(cfg, all_params, pe)
    seg = cfg.segment_size if cfg.checkpoint == "segments" else (1 if cfg.checkpoint == "per_layer" else 0)

    sim = _Sim()
    sim.phase = "model"
    sim.add("parameters", P)
    sim.phase = "data"
    sim.add("data", x_bytes * cfg.accum + y_bytes * cfg.accum)
    grads_live = False
    for step in (1, 2):
        sim.phase = "zero_grad"
        if grads_live and cfg.zero_grad_to_none:
            sim.free("gradients", P)
            grads_live = False
        for _micro in range(cfg.accum):
            _forward_backward(sim, cfg, layers, head, per_layer_p, per_layer_cast, head_p, head_cast, seg, grads_live)
            grads_live = True
        sim.phase = "optimizer_step"
        if step == 1:
            sim.add("optimizer_state", state + opt_steps)
        sim.add("temporaries", 0, transient=opt_tmp)

    fits = None if capacity_bytes is None else sim.peak <= capacity_bytes
    return {
        "categories": {c: int(sim.peak_cats.get(c, 0)) for c in CATS},
        "steady": {c: int(v) for c, v in sim.cur.items()},
        "peak_bytes": int(sim.peak),
        "peak_phase": sim.peak_phase,
        "capacity_bytes": capacity_bytes,
        "fits": fits,
        "method": "analytic",
    }


def _forward_backward(sim, cfg, layers, head, per_layer_p, per_layer_cast, head_p, head_cast, seg, grads_live):
    n = len(layers)
    segments = [list(range(a, min(a + seg, n))) for a in range(0, n, seg)] if seg else [[i] for i in range(n)]
    bounds = {members[-1] for members in segments}
    sim.phase = "forward"
    for i, layer in enumerate(layers):
        if seg:
            # Inside a checkpoint nothing is saved: internals and autocast copies die with the layer.
            sim.add("activations", layer.out, transient=layer.fwd_tmp + layer.saved + per_layer_cast[i])
            if i - 1 >= 0 and (i - 1) not in bounds:
                sim.free("activations", layers[i - 1].out)
        else:
            sim.add("autocast_copies", per_layer_cast[i])
            sim.add("activations", layer.out + layer.saved, transient=layer.fwd_tmp)
    sim.add("autocast_copies", head_cast)
    sim.add("activations", head.out + head.saved)

    sim.phase = "backward"
    grad_bytes = layers[-1].out  # gradient of the model output
    sim.add("temporaries", grad_bytes, transient=head.bwd_tmp)
    sim.free("activations", head.out + head.saved)
    sim.free("autocast_copies", head_cast)
    _param_grad(sim, head_p, grads_live)
    for members in reversed(segments):
        if seg:
            # The segment's output is released once its consumer (the next segment or the
            # loss) has run backward; then the segment's forward is recomputed.
            sim.free("activations", layers[members[-1]].out)
            for i in members:
                sim.add("autocast_copies", per_layer_cast[i])
                sim.add("activations", layers[i].saved + layers[i].out, transient=layers[i].fwd_tmp)
        for i in reversed(members):
            layer = layers[i]
            sim.add("temporaries", layer.grad_in, transient=layer.bwd_tmp + (per_layer_p[i] if grads_live else 0))
            _param_grad(sim, per_layer_p[i], grads_live)
            sim.free("temporaries", grad_bytes)
            grad_bytes = layer.grad_in
            sim.free("activations", layer.saved + layer.out)
            sim.free("autocast_copies", per_layer_cast[i])
    sim.free("temporaries", grad_bytes)


def _param_grad(sim, nbytes: int, grads_live: bool) -> None:
    # First gradient of a step becomes .grad itself; later ones are added in place.
    if not grads_live:
        sim.add("gradients", nbytes)
