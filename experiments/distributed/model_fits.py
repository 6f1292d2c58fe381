"""What fits a memory size, by replay: for each precision x optimizer implementation x checkpointing the largest batch
that fits, and the cheapest combination that trains the asked-for batch (accumulating gradients where it must); across
N GPUs, the fewest ranks and the strategy (experiments/distributed/estimate.py's per-rank replay).

The optimizer implementation changes only the optimizer step: forward and backward allocate the same storages and
the state has the same size for every implementation. So one replay per batch gives every implementation's peak:

    peak(impl, b) = max(peak of the other phases at b,
                        max over steps s of [allocated before step s at b + extra(impl, s)])

where extra(impl, s), what step s adds on what is alive before it, comes from the optimizer alone replayed on fake
parameters and gradients of the model's shapes (the step sees nothing else; tested equal to the whole run's). The
cheapest answer is confirmed by a replay of its own, with the allocator model on CUDA.

"Cheapest" is an order, not a measurement: no recomputation before recomputation (checkpointing costs about one more
forward), then the fewest micro-batches, then fused < foreach < for-loop (CUDA's speed order for Adam), then the
precisions in the order asked for.
"""

from __future__ import annotations

import time

from ..core.capacity import reserved_limit
from ..core.config import ExperimentConfig
from ..core.finetune import BNB_OPTIMIZERS
from ..estimate.allocator_limit import first_oom, reserved_through
from ..estimate.estimator import cuda_config, estimate_or_refusal
from ..estimate.fast_replay import fast_replay, replays_whole
from .estimate import what_fits as fits_across_ranks
from .fits_traces import drawable, peak_or_none, phase_rows, replayed_events, replays_made, shapes, unmeasured_ops
from .fits_traces import events as _events
from .optimizer_alone import optimizer_extras, parameter_shapes
from .search import below, crossing

IMPL_ORDER = ("fused", "foreach", "for-loop")
CHECKPOINTS = ("none", "per_layer")


class _Grid:
    def __init__(self, cfg: ExperimentConfig, device_type: str, traces: dict | None = None, transients=None):
        self.cfg, self.device_type = cfg, device_type
        # A model that the fast path replays whole anyway: its replay, events kept, is the one the allocator check reads.
        self.traces, self.transients = traces, transients
        self.block = 512 if device_type == "cuda" else 1
        self.replays = 0
        # The search's phase rows do not depend on the implementation; bitsandbytes' optimizers have one.
        self.first_impl = "default" if cfg.optimizer in BNB_OPTIMIZERS else IMPL_ORDER[0]
        self._train: dict = {}
        self._extra: dict = {}
        self._shapes: dict = {}

    def train(self, precision: str, checkpoint: str, batch: int) -> tuple[int, list[int]]:
        """(peak of every phase but the optimizer steps, allocated before each optimizer step) at this batch."""
        key = (precision, checkpoint, batch)
        if key not in self._train:
            cfg = self.cfg.replace(precision=precision, checkpoint=checkpoint, batch=batch, accum=1)
            # The search reads the phase rows only; the answer is confirmed by a replay with the allocator model.
            cfg = cfg.replace(optimizer_impl=self.first_impl)
            cuda = self.traces is not None and self.device_type == "cuda"
            if cuda and (replays_whole(cfg) or drawable(cfg, self.traces)):
                rows = phase_rows(cfg, self.transients, self.traces)
            else:
                self.replays += 1
                rows = fast_replay(cfg, block=self.block, phases_only=True)["phases"]
            train = max(p["peak_bytes"] for p in rows if p["phase"] != "optimizer_step")
            before = [rows[i - 1]["allocated_bytes"] for i, p in enumerate(rows) if p["phase"] == "optimizer_step"]
            self._train[key] = (train, before, rows)
        return self._train[key][:2]

    def sample_bytes(self, precision: str, checkpoint: str) -> int:
        """About what one more sample adds: step 2's forward above what is alive before it (the activations it saves,
        checkpointed or not). Not backward's: at a small batch its peak is the gradients, which the batch leaves."""
        self.train(precision, checkpoint, 1)
        rows = self._train[(precision, checkpoint, 1)][2]
        i = next(i for i, p in enumerate(rows) if p["phase"] == "forward" and p["step"] == 2)
        return rows[i]["peak_bytes"] - rows[i - 1]["allocated_bytes"]

    def extra(self, precision: str, impl: str) -> list[int]:
        key = (precision, impl)
        if key not in self._extra:
            self.replays += 1
            cfg = self.cfg.replace(precision=precision, optimizer_impl=impl)
            if precision not in self._shapes and precision != "amp_fp16":
                self._shapes[precision] = shapes(cfg, self.traces) if self.traces is not None else parameter_shapes(cfg)
            self._extra[key] = optimizer_extras(cfg, self.block, self._shapes.get(precision), memo=self.traces)
        return self._extra[key]

    def peak(self, precision: str, impl: str, checkpoint: str, batch: int) -> int:
        train, before = self.train(precision, checkpoint, batch)
        return max(train, *(b + e for b, e in zip(before, self.extra(precision, impl), strict=True)))

    def largest_batch(self, precision: str, impl: str, checkpoint: str, capacity: int, limit: int) -> int:
        b = crossing(
            lambda n: self.train(precision, checkpoint, n)[0], capacity, limit, self.sample_bytes(precision, checkpoint)
        )
        while b > 0 and self.peak(precision, impl, checkpoint, b) > capacity:
            b -= 1  # the step adds a fixed amount on what is alive before it, which grows with the batch by data only
        return b


def card_reserved(events: list, budget: int, expandable: bool = False) -> int:
    """What decides whether an allocation trace runs on a card that leaves the allocator `budget` bytes: it does
    where this is within core/capacity.reserved_limit(budget). The default allocator gives its cached segments back
    only where the card is full (allocator_limit.reserved_through); its reserved peak then has to keep the margin,
    which covers the model's error (a peak that comes closer to the card is too close to call). Expandable segments
    give free pages back without that risk, so what they keep is the live memory in whole pages: whether it gets
    through the limit that keeps the margin (0) or not. Past the limit where the run runs out of memory."""
    limit = reserved_limit(budget)
    if expandable:
        return 0 if first_oom(events, limit, True) is None else limit + 1
    peak = reserved_through(events, budget)
    return limit + 1 if peak is None else peak


def runs_on_card(cfg: ExperimentConfig, budget: int, expandable: bool = False, transients=None, cache=None) -> bool:
    """Whether cfg's CUDA run gets through a card that leaves the allocator `budget` bytes (`card_reserved`, on the
    full replay's allocation trace). `cache`: a dict that keeps the trace per configuration."""
    return card_reserved(_events(cfg, transients, cache), budget, expandable) <= reserved_limit(budget)


def allocated_largest_batch(cfg: ExperimentConfig, budget: int, max_batch: int = 4096) -> int:
    """The largest batch whose allocated peak is within `budget` (a run cannot need less: where the search starts)."""
    return _Grid(cfg, "cuda").largest_batch(
        cfg.precision, cuda_config(cfg).optimizer_impl, cfg.checkpoint, budget, max_batch
    )


def largest_that_runs(
    cfg: ExperimentConfig,
    card_bytes: int,
    overhead_bytes: int,
    expandable: bool = False,
    max_batch: int = 4096,
    transients=None,
    cache: dict | None = None,
    start: int | None = None,
    hint: int | None = None,
) -> dict:
    """The largest batch of cfg (its other levers as they are) that runs on a card of `card_bytes` whose process holds
    `overhead_bytes` outside the allocator: the allocated-peak search gives the candidate (a run cannot need less;
    `start` where the caller has it), then the allocator's own rules step it down while the run would run out of
    memory (a large request that no cached segment holds, with the default allocator, even after it gives its cached
    segments back) or its reserved peak leaves less than core/capacity.RESERVED_MARGIN to spare. `hint`: a likely
    answer (another implementation's, the other allocator's), tried first with the batch above it.
    {"largest_batch", "replays"}."""
    budget = max(0, card_bytes - overhead_bytes)
    cache = {} if cache is None else cache
    before = replays_made(cache)
    b, searched = start, 0
    if b is None:
        grid = _Grid(cfg, "cuda", cache, transients)
        b = grid.largest_batch(cfg.precision, cuda_config(cfg).optimizer_impl, cfg.checkpoint, budget, max_batch)
        searched = grid.replays

    limit = reserved_limit(budget)

    def reserved(n: int) -> int:
        return card_reserved(_events(cfg.replace(batch=n, accum=1), transients, cache), budget, expandable)

    top = reserved(b) if b else 0
    largest = b if top <= limit else below(reserved, limit, b, top, hint)
    largest = _as_replayed(cfg, budget, expandable, transients, cache, largest)
    return {"largest_batch": largest, "replays": searched + replays_made(cache) - before}


def _as_replayed(cfg, budget: int, expandable: bool, transients, cache: dict, largest: int) -> int:
    """The answer the batch line gave, checked against a replay at its own batch and stepped down while it does not
    run. The line is checked once, at the first batch the search asks above its samples; a path that changes past
    that batch would show here, on the side a learner acts on (a batch the line says runs)."""
    limit = reserved_limit(budget)

    def reserved(n: int) -> int:
        return card_reserved(replayed_events(cfg.replace(batch=n, accum=1), transients, cache), budget, expandable)

    if largest > 0 and (at := reserved(largest)) > limit:
        return below(reserved, limit, largest, at)
    return largest


def what_fits(
    cfg: ExperimentConfig,
    capacity_bytes: int,
    device_type: str = "cuda",
    precisions: tuple[str, ...] | None = None,
    impls: tuple[str, ...] = IMPL_ORDER,
    max_batch: int = 4096,
    overhead_bytes: int | None = None,
    transients=None,
    progress=None,
) -> dict:
    """`cfg`: the learner's levers (its batch is the one to train, its optimizer the one to use). The grid (largest
    batch per combination, with its peak) and the cheapest combination that trains cfg.batch.

    On CUDA, `capacity_bytes` is the card's memory (or what is free on a live GPU) and the answer is what runs on it:
    the process holds `overhead_bytes` outside the allocator (default: experiments/core/cards.json's measured
    figure), and each row's largest batch is checked against the allocator's rules, with the default allocator
    (`largest_batch`) and with expandable segments (`largest_batch_expandable`). `progress(done, planned)` is called
    as the replays go."""
    t0 = time.perf_counter()
    cuda = device_type == "cuda"
    if overhead_bytes is None:
        from ..core.cards import overhead_bytes as measured_overhead

        overhead_bytes = measured_overhead() if cuda else 0
    if cfg.optimizer == "sgd":
        impls = tuple(i for i in impls if i != "fused") or ("foreach",)
    if cfg.optimizer in BNB_OPTIMIZERS:
        impls = ("default",)
    precisions = precisions or (cfg.precision,)
    traces: dict = {}
    grid = _Grid(cfg, device_type, traces, transients)
    budget = max(0, capacity_bytes - overhead_bytes)
    rows = []
    planned = len(precisions) * len(CHECKPOINTS) * len(impls)
    hints: dict = {}
    for precision in precisions:
        for checkpoint in CHECKPOINTS:
            for impl in impls:
                b = grid.largest_batch(precision, impl, checkpoint, budget, max_batch)
                row = {"precision": precision, "optimizer_impl": impl, "checkpoint": checkpoint, "allocated_batch": b}
                if cuda:
                    lever = cfg.replace(precision=precision, optimizer_impl=impl, checkpoint=checkpoint)
                    # The implementation changes only the optimizer step: the answer is often another one's.
                    hint = hints.get((precision, checkpoint))
                    for key, expandable in (("largest_batch", False), ("largest_batch_expandable", True)):
                        r = largest_that_runs(
                            lever, capacity_bytes, overhead_bytes, expandable, max_batch, transients, traces, b, hint
                        )
                        row[key] = hint = r["largest_batch"]
                    hints[(precision, checkpoint)] = row["largest_batch"]
                else:
                    row["largest_batch"] = row["largest_batch_expandable"] = b
                b = row["largest_batch"]
                row["peak_bytes"] = grid.peak(precision, impl, checkpoint, b) if b else None
                # What this combination needs at the learner's own batch (the same replays): what each lever saves.
                row["peak_at_batch_bytes"] = grid.peak(precision, impl, checkpoint, cfg.batch)
                rows.append(row)
                if progress is not None:
                    progress(len(rows), planned)
    own_impl = cuda_config(cfg).optimizer_impl if cuda else cfg.optimizer_impl
    own_impl = own_impl if own_impl in impls else impls[0]
    yours = grid.peak(cfg.precision, own_impl, cfg.checkpoint if cfg.checkpoint in CHECKPOINTS else "none", cfg.batch)
    for row in rows:
        row["saves_bytes"] = yours - row["peak_at_batch_bytes"]
        row["saves_percent"] = round(100 * row["saves_bytes"] / yours, 1) if yours else None
    rank = {impl: i for i, impl in enumerate((*IMPL_ORDER, "default"))}
    options = []
    for row in rows:
        accum = next(
            (a for a in range(1, cfg.batch + 1) if cfg.batch % a == 0 and cfg.batch // a <= row["largest_batch"]), None
        )
        if accum is not None and accum <= 64:
            order = (
                row["checkpoint"] != "none",
                accum,
                rank[row["optimizer_impl"]],
                precisions.index(row["precision"]),
            )
            options.append((order, row, accum))
    cheapest = None
    for _order, row, accum in sorted(options, key=lambda o: o[0]):
        # Accumulation keeps the gradients alive through the later micro-batches: confirmed with its own replay.
        choice = cfg.replace(
            precision=row["precision"], optimizer_impl=row["optimizer_impl"], checkpoint=row["checkpoint"], accum=accum
        )
        if cuda:
            # The same traces the search read (drawn, or a replay of its own where accumulation makes it another run).
            peak = peak_or_none(choice, transients, traces)  # a refusal: this combination is not the answer
        else:
            grid.replays += 1
            est = estimate_or_refusal(choice, device_type=device_type)
            peak = est["peak_bytes"] if est["predicted"] else None
        within = peak is not None and peak <= budget
        if within and cuda:
            within = runs_on_card(choice, budget, False, transients, traces)
        if within:
            keys = ("precision", "optimizer_impl", "checkpoint", "accum")
            cheapest = {
                **{k: getattr(choice, k) for k in keys},
                "micro_batch": choice.micro_batch,
                "peak_bytes": peak,
            }
            break
    return {
        "config": cfg.to_dict(),
        "capacity_bytes": capacity_bytes,
        "overhead_bytes": overhead_bytes,
        "device_type": device_type,
        "batch": cfg.batch,
        "your_peak_bytes": yours,
        "grid": rows,
        "cheapest": cheapest,
        "replays": grid.replays + replays_made(traces),
        # Kernel scratch the answers do not count (a convolution's cuDNN workspace, unmeasured without this GPU).
        "unmeasured_ops": unmeasured_ops(traces) if cuda else [],
        "seconds": round(time.perf_counter() - t0, 2),
    }


def fits_across(cfg: ExperimentConfig, capacity_bytes: int, max_world_size: int = 8, device_type: str = "cuda"):
    """The fewest GPUs, then the strategy with the least traffic, whose per-rank peak fits (per-rank batch)."""
    return fits_across_ranks(
        cuda_config(cfg).to_dict() if device_type == "cuda" else cfg.to_dict(),
        capacity_bytes,
        max_world_size,
        device_type,
    )
