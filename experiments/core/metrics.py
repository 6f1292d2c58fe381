"""Figures read off a result dict (a live run, a leak run or a recorded one). Torch-free.

The lessons' expectations and the numbers their prose quotes are all computed from these readers, so the page, the
tests and the recorded files agree on what "the peak" or "the saving" means; the figures they name are registered in
experiments/core/named_metrics.py.
"""

from __future__ import annotations

from . import families
from .config import ConfigError, ExperimentConfig
from .rounds import VERDICT_MIN_ROUNDS, VERDICTS, paired, paired_ratios  # noqa: F401 - read through metrics too
from .vocabulary import MODEL_STATES


def net_peak(result: dict) -> int | None:
    """Peak allocated by the experiment itself: the pre-run baseline (CUDA context's cuBLAS workspaces) removed."""
    peak = result.get("peak_bytes")
    if peak is None:
        return None
    return peak - (result.get("baseline_bytes") or 0)


def peak_phase(result: dict) -> str | None:
    return (result.get("peak_phase") or {}).get("phase")


def device_type(result: dict) -> str:
    return (result.get("device") or {}).get("type", "cpu")


def breakdown_total(result: dict) -> int:
    return sum((result.get("breakdown") or {}).values())


def category_bytes(result: dict, category) -> int | None:
    """Bytes of one category (or the sum of a list of them) at the peak; None when the breakdown does not have it.

    The tracker writes every tensor category, zeros included, so a missing one was not measured: None, never 0
    (a share maximum must not pass on a category nobody counted). The one exception is "other" on a GPU, which
    the runner writes only when it is positive.
    """
    cats = result.get("breakdown")
    if cats is None:
        return None
    total = 0
    for name in [category] if isinstance(category, str) else list(category):
        if name in cats:
            total += int(cats[name])
        elif not (name == "other" and device_type(result) == "cuda"):
            return None
    return total


def category_share(result: dict, category) -> float | None:
    total = breakdown_total(result)
    value = category_bytes(result, category)
    return None if not total or value is None else value / total


def breakdown_gap(result: dict, source: str = "measured") -> int | None:
    """The categories drawn at the peak minus the peak they are drawn beside (bytes): the measured breakdown
    against the peak above the baseline, the estimate's categories against the estimated peak."""
    if source == "estimated":
        est = result.get("estimate") or {}
        cats, peak = est.get("categories"), est.get("peak_bytes")
    else:
        cats, peak = result.get("breakdown"), net_peak(result)
    if not cats or peak is None:
        return None
    return sum(int(v) for v in cats.values()) - peak


def largest_category(result: dict) -> tuple[str, int] | None:
    cats = result.get("breakdown") or {}
    if not cats:
        return None
    name = max(cats, key=cats.get)
    return name, int(cats[name])


def phases(result: dict, step: int | None = None, phase: str | None = None) -> list[dict]:
    return [
        p
        for p in result.get("phases") or []
        if (step is None or p.get("step") == step) and (phase is None or p.get("phase") == phase)
    ]


def parameter_bytes(result: dict) -> int | None:
    """What the model phase allocated: the parameters, as the runner builds them on the device."""
    model = phases(result, 0, "model")
    if not model:
        return None
    return model[0]["allocated_bytes"] - (result.get("baseline_bytes") or 0)


def phase_growth(result: dict, step: int, phase: str) -> int | None:
    """allocated at the end of (step, phase) minus at the end of the phase before it (last micro-batch)."""
    rows = result.get("phases") or []
    for i, p in enumerate(rows):
        if p.get("step") == step and p.get("phase") == phase and i > 0:
            last = max(j for j, q in enumerate(rows) if q.get("step") == step and q.get("phase") == phase)
            first = min(j for j, q in enumerate(rows) if q.get("step") == step and q.get("phase") == phase)
            return rows[last]["allocated_bytes"] - rows[first - 1]["allocated_bytes"]
    return None


def step_peak(result: dict, step: int) -> int | None:
    rows = phases(result, step)
    return max(p["peak_bytes"] for p in rows) if rows else None


def phase_peak(result: dict, step: int, phase: str) -> int | None:
    rows = phases(result, step, phase)
    return max(p["peak_bytes"] for p in rows) if rows else None


def steady_steps_repeat(result: dict) -> bool | None:
    """Do all steps from 2 on end every phase with exactly the same allocated bytes?"""
    steps = sorted({p["step"] for p in result.get("phases") or [] if p.get("step", 0) >= 2})
    if len(steps) < 2:
        return None
    pattern = [[(p["phase"], p.get("micro"), p["allocated_bytes"]) for p in phases(result, s)] for s in steps]
    return all(row == pattern[0] for row in pattern[1:])


def step_ms(result: dict) -> float | None:
    return (result.get("step_ms") or {}).get("median")


# The device rate an fp32 step's arithmetic is judged against: what PyTorch's defaults give a learner's script,
# so fp32 matmuls run without TF32 while cuDNN convolutions use it (torch.backends.cudnn.allow_tf32 is True).
RATE_OF_PRECISION = {"fp32": "fp32", "tf32": "tf32", "amp_bf16": "bf16", "amp_fp16": "fp16", "bf16": "bf16"}


def device_rate(result: dict) -> float | None:
    """The TFLOP/s the device itself reached on large matmuls at this run's precision (measured with the run)."""
    config = result.get("config") or {}
    precision = config.get("precision", "fp32")
    name = "tf32" if precision == "fp32" and config.get("model") == "cnn" else RATE_OF_PRECISION.get(precision)
    rates = ((result.get("device") or {}).get("rates") or {}).get("tflops") or {}
    return rates.get(name)


def config_parameter_bytes(config: dict) -> int | None:
    """The model's parameter bytes, counted from its configuration (for results without a model phase)."""
    try:
        return families.parameter_bytes(ExperimentConfig.from_dict(config))
    except (ConfigError, TypeError, ValueError):
        return None


def output_unit_bytes(result: dict) -> int | None:
    """One fp32 layer output of a run: batch x width (x seq_len for a transformer) x 4 bytes."""
    config = result.get("config") or {}
    if "batch" not in config or "width" not in config:
        return None
    tokens = int(config["batch"]) * (int(config.get("seq_len") or 1) if config.get("model") == "transformer" else 1)
    return tokens * int(config["width"]) * 4


PROFILE_COLUMNS = {
    "self": "self_device_memory_bytes",
    "total": "device_memory_bytes",
    "self_cpu": "self_cpu_memory_bytes",
}


def profile_bytes(result: dict, row: str, column: str) -> int | None:
    """A profiler table's figure for one operator (its name before '#'), summed over its rows; None if absent."""
    key = PROFILE_COLUMNS[column]
    rows = [r for r in result.get("rows") or [] if str(r.get("name", "")).split("#")[0] == row]
    return sum(int(r.get(key) or 0) for r in rows) if rows else None


def output_bytes(result: dict) -> int | None:
    """Bytes of one (batch, width) fp32 tensor of a leak run: the size of one kept model output."""
    if "batch" not in result or "width" not in result:
        return None
    return int(result["batch"]) * int(result["width"]) * 4


def leak_growth(result: dict) -> float | None:
    return result.get("growth_bytes_per_step")


def growth_per_step(per_step: list[dict]) -> float:
    """A leak run's growth per step (bytes): over the second half of its steps, after the first step's gradients
    appeared. The run stores it beside its steps; the recordings' test recomputes it from them."""
    half = per_step[len(per_step) // 2 :]
    return (half[-1]["allocated_bytes"] - half[0]["allocated_bytes"]) / max(1, half[-1]["step"] - half[0]["step"])


def frag_unallocated(result: dict) -> int | None:
    """Reserved but unallocated bytes at the end of a fragmentation run (what an OOM message reports)."""
    end = result.get("end") or {}
    if end.get("reserved_bytes") is None:
        return None
    return end["reserved_bytes"] - end["allocated_bytes"]


def frag_larger_fits(run: dict) -> int | None:
    """How many requests of a holes pattern's larger size were served: the allocations after its last free."""
    points = run.get("points") or []
    frees = [i for i, p in enumerate(points) if p.get("op") == "free"]
    if not points or not frees:
        return None
    return sum(1 for p in points[frees[-1] + 1 :] if p.get("op") == "alloc")


def state_bytes_per_parameter(result: dict) -> float | None:
    """Model states a rank (or a device) holds after a step (parameters, gradients and optimizer state, the steady
    breakdown), per parameter of the whole model: 16 for fp32 Adam on one device, 16/N under ZeRO-3."""
    steady, params = result.get("breakdown_steady"), parameter_bytes(result)
    if not steady or not params:
        return None
    element = 2 if (result.get("config") or {}).get("precision") == "bf16" else 4
    held = sum(steady.get(k, 0) for k in MODEL_STATES)
    return held / (params / element)


def profile_row(result: dict, row: str) -> dict | None:
    """The profiler table's row whose name starts with `row` (the table sums each operator's calls)."""
    return next((r for r in result.get("rows") or [] if str(r.get("name", "")).startswith(row)), None)


PAIRED_FIELDS = {
    "paired_ratio": "median",
    "paired_ratio_lo": "lo",
    "paired_ratio_hi": "hi",
    "paired_rounds_slower": "slower",
    "paired_rounds_faster": "faster",
}
