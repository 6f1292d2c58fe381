"""Figures read off a result dict (a live run, a leak run or a recorded one). Torch-free.

The lessons' expectations and the numbers their prose quotes are all computed here, so the page,
the tests and the recorded files agree on what "the peak" or "the saving" means.
"""

from __future__ import annotations

from . import families
from .config import ConfigError, ExperimentConfig
from .rounds import VERDICT_MIN_ROUNDS, VERDICTS, paired, paired_ratios  # noqa: F401 - read through metrics too
from .units import KIB, MIB
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


def _saved(baseline: dict, result: dict) -> int | None:
    tech, base = net_peak(result), net_peak(baseline)
    return None if base is None or tech is None else base - tech


def scalar(metric: str, result: dict, baseline: dict | None = None, **args) -> float | None:
    """One named figure of a result (or of a result against a baseline), as lessons and checks name them."""
    if metric == "net_peak_mib":
        value = net_peak(result)
        return None if value is None else value / MIB
    if metric == "peak_mib":
        value = result.get("peak_bytes")
        return None if value is None else value / MIB
    if metric == "baseline_mib":
        return (result.get("baseline_bytes") or 0) / MIB
    if metric == "parameters_mib":
        value = parameter_bytes(result)
        return None if value is None else value / MIB
    if metric == "category_mib":
        value = category_bytes(result, args["category"])
        return None if value is None else value / MIB
    if metric == "category_share_pct":
        value = category_share(result, args["category"])
        return None if value is None else value * 100
    if metric == "category_per":
        # One category in units of another in the same run ("Adam's state is twice the parameters").
        value, per = category_bytes(result, args["category"]), category_bytes(result, args["per"])
        return None if value is None or not per else value / per
    if metric == "phase_peak_mib":
        value = phase_peak(result, args["step"], args["phase"])
        if value is None:
            return None
        return (value - (result.get("baseline_bytes") or 0)) / MIB
    if metric == "phase_peak_ratio":
        # Sizes cancel: a claim such as "step 1's backward peaks far below step 2's" holds at any scale.
        a = scalar("phase_peak_mib", result, step=args["step"], phase=args["phase"])
        b = scalar("phase_peak_mib", result, step=args["versus_step"], phase=args["phase"])
        return None if a is None or not b else a / b
    if metric == "phase_peak_gap_params":
        # How much higher a phase peaks in versus_step than in step, in parameter units ("step 1's backward is
        # lower because Adam's state, twice the parameters, did not exist yet").
        a = phase_peak(result, args["step"], args["phase"])
        b = phase_peak(result, args["versus_step"], args["phase"])
        params = parameter_bytes(result)
        return None if a is None or b is None or not params else (b - a) / params
    if metric == "phase_growth_mib":
        value = phase_growth(result, args["step"], args["phase"])
        return None if value is None else value / MIB
    if metric == "step_ms":
        return step_ms(result)
    if metric == "step_spread_pct":
        s = result.get("step_ms") or {}
        return None if not s.get("median") else (s["p90"] - s["p10"]) / s["median"] * 100
    if metric == "tflops":
        return result.get("tflops")
    if metric == "tflops_share_pct":
        # The achieved rate as a share of what the device reaches on large matmuls at this precision.
        tflops, rate = result.get("tflops"), device_rate(result)
        return None if not tflops or not rate else tflops / rate * 100
    if metric == "profile_params":
        value = profile_bytes(result, args["row"], args["column"])
        params = config_parameter_bytes(result.get("config") or {})
        return None if value is None or not params else value / params
    if metric == "leak_growth_bytes":
        return leak_growth(result)
    if metric == "leak_growth_kib":
        value = leak_growth(result)
        return None if value is None else value / KIB
    if metric == "leak_gc_freed_kib":
        value = result.get("gc_freed_bytes")
        return None if value is None else value / KIB
    if metric == "gc_freed_per_step":
        # What gc.collect() freed after the loop, in one kept model output per step: 1 when every step left one
        # output in a reference cycle, 0 when what the loop keeps is still referenced (a real leak) or nothing.
        value, unit, rows = result.get("gc_freed_bytes"), output_bytes(result), result.get("per_step") or []
        steps = rows[-1]["step"] if rows else 0
        return None if value is None or not unit or not steps else value / steps / unit
    if metric == "frag_unallocated_mib":
        value = frag_unallocated(result)
        return None if value is None else value / MIB
    if metric == "frag_reserved_mib":
        value = (result.get("end") or {}).get("reserved_bytes")
        return None if value is None else value / MIB
    if metric == "frag_allocated_mib":
        value = (result.get("end") or {}).get("allocated_bytes")
        return None if value is None else value / MIB
    if metric == "frag_larger_fits":
        return frag_larger_fits(result)
    if metric == "host_mib":
        value = result.get("host_peak_bytes")
        return None if value is None else value / MIB
    if metric == "driver_outside_mib":
        # What the driver reports in use on the device beyond what PyTorch's allocator reserved (at the end of the
        # measured steps): the CUDA context, NCCL's own buffers, other processes' contexts on that GPU.
        driver, rows = result.get("driver") or {}, result.get("phases") or []
        reserved = rows[-1].get("reserved_bytes") if rows else None
        if not driver or reserved is None:
            return None
        return (driver["total_bytes"] - driver["free_bytes"] - reserved) / MIB
    if metric == "state_bytes_per_param":
        return state_bytes_per_parameter(result)
    if metric in ("profile_self_mib", "profile_total_mib"):
        found = profile_row(result, args["row"])
        key = "self_device_memory_bytes" if metric == "profile_self_mib" else "device_memory_bytes"
        return None if found is None or key not in found else found[key] / MIB
    if metric == "round_median_ms":
        rows = [r for r in result.get("strategies") or [] if r.get("id") == args["strategy"]]
        return rows[0]["median_ms"] if rows else None
    if metric in PAIRED_FIELDS:
        summary = paired(result, args["strategy"], args["versus"])
        return None if summary is None else summary[PAIRED_FIELDS[metric]]
    if metric == "round_separation_pct":
        # Unpaired, to show what pairing adds: > 0 when the strategy's fastest round is slower than the other's
        # slowest, by this % of the other's median; <= 0 when their ranges over rounds overlap.
        rows = {r["id"]: r for r in result.get("strategies") or []}
        a, b = rows.get(args["strategy"]), rows.get(args["versus"])
        if not a or not b or not b.get("median_ms"):
            return None
        return (a["min_ms"] - b["max_ms"]) / b["median_ms"] * 100
    if metric == "round_spread_pct":
        rows = [r for r in result.get("strategies") or [] if r.get("id") == args["strategy"]]
        if not rows or not rows[0].get("median_ms"):
            return None
        rounds = rows[0]["round_ms"]
        return (max(rounds) - min(rounds)) / rows[0]["median_ms"] * 100
    if baseline is None:
        raise KeyError(f"unknown metric {metric!r}")
    if metric == "peak_saving_pct":
        tech, base = net_peak(result), net_peak(baseline)
        if not base or tech is None or result.get("oom") or baseline.get("oom"):
            return None
        return (base - tech) / base * 100
    if metric == "peak_ratio":
        tech, base = net_peak(result), net_peak(baseline)
        return None if not base or tech is None else tech / base
    if metric == "saved_mib":
        tech, base = net_peak(result), net_peak(baseline)
        return None if base is None or tech is None else (base - tech) / MIB
    if metric == "step_time_ratio":
        tech, base = step_ms(result), step_ms(baseline)
        return None if not base or tech is None else tech / base
    if metric == "phase_peak_pair_ratio":
        tech = scalar("phase_peak_mib", result, step=args["step"], phase=args["phase"])
        base = scalar("phase_peak_mib", baseline, step=args["step"], phase=args["phase"])
        return None if not base or tech is None else tech / base
    if metric == "saved_per_category":
        # The peak saved, in units of one category of the baseline ("it fell by more than Adam's two states").
        saved, cat = _saved(baseline, result), category_bytes(baseline, args["category"])
        return None if saved is None or not cat else saved / cat
    if metric == "saved_outputs":
        # The peak saved, in fp32 layer outputs of the run ("in-place ReLU removes only that one tensor").
        saved, unit = _saved(baseline, result), output_unit_bytes(result)
        return None if saved is None or not unit else saved / unit
    if metric == "saving_vs_category":
        # The peak's relative saving over the category's relative saving: below 1 when the rest of the peak stays.
        peak = scalar("peak_saving_pct", result, baseline)
        tech, base = category_bytes(result, args["category"]), category_bytes(baseline, args["category"])
        if peak is None or tech is None or not base or base == tech:
            return None
        return peak / ((base - tech) / base * 100)
    if metric == "saving_ratio":
        # What one change saves on top of another, over what it saves alone: below 1, the two overlap.
        mine, alone = _saved(baseline, result), _saved(args["versus_baseline"], args["versus"])
        return None if mine is None or not alone else mine / alone
    if metric == "category_ratio":
        tech, base = category_bytes(result, args["category"]), category_bytes(baseline, args["category"])
        return None if not base or tech is None else tech / base
    raise KeyError(f"unknown metric {metric!r}")
