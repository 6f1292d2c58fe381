"""The figures lessons and checks name ("net_peak_mib", "peak_ratio", ...), as one registry. Torch-free.

Each name says what it reads, one run or a run against a baseline, which arguments it needs (a category, a step
and a phase, two strategies of a rounds result, a profiler row) and how it is computed from the readers of
experiments/core/metrics.py. course/expectations.py validates a check against this registry and course/facts.py
computes a quoted number from it, so a new figure is written once, here, with what it needs.

    scalar("category_mib", run, category="activations")
    scalar("peak_ratio", run, baseline)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from . import metrics as m
from .units import KIB, MIB


class Metric(NamedTuple):
    compute: Callable  # (result, **needs) or (result, baseline, **needs) -> float | None
    runs: int  # 1: one run; 2: a run against a baseline run
    needs: tuple[str, ...]  # the arguments it reads, as a check or a fact names them


REGISTRY: dict[str, Metric] = {}


def _register(runs: int, *names: str, needs: tuple[str, ...] = ()):
    def add(fn):
        for name in names:
            REGISTRY[name] = Metric(fn, runs, needs)
        return fn

    return add


def one(*names: str, needs: tuple[str, ...] = ()):
    return _register(1, *names, needs=needs)


def pair(*names: str, needs: tuple[str, ...] = ()):
    return _register(2, *names, needs=needs)


def named(needs: str) -> set[str]:
    """The metrics that need this argument."""
    return {name for name, metric in REGISTRY.items() if needs in metric.needs}


def scalar(metric: str, result: dict, baseline: dict | None = None, **args) -> float | None:
    """One named figure of a result (or of a result against a baseline); `args` may hold more than it reads."""
    found = REGISTRY.get(metric)
    if found is None:
        raise KeyError(f"unknown metric {metric!r}")
    kwargs = {k: args[k] for k in found.needs}
    if found.runs == 1:
        return found.compute(result, **kwargs)
    if baseline is None:
        raise KeyError(f"{metric} compares two runs: give a baseline")
    return found.compute(result, baseline, **kwargs)


def _mib(value) -> float | None:
    return None if value is None else value / MIB


def _kib(value) -> float | None:
    return None if value is None else value / KIB


def _over(a, b) -> float | None:
    return None if a is None or not b else a / b


# ---------------------------------------------------------------------------------------------- one run


one("net_peak_mib")(lambda r: _mib(m.net_peak(r)))
one("peak_mib")(lambda r: _mib(r.get("peak_bytes")))
one("baseline_mib")(lambda r: (r.get("baseline_bytes") or 0) / MIB)
one("parameters_mib")(lambda r: _mib(m.parameter_bytes(r)))
one("category_mib", needs=("category",))(lambda r, category: _mib(m.category_bytes(r, category)))
one("step_ms")(m.step_ms)
one("tflops")(lambda r: r.get("tflops"))
one("leak_growth_bytes")(m.leak_growth)
one("frag_larger_fits")(m.frag_larger_fits)
one("state_bytes_per_param")(m.state_bytes_per_parameter)
one("host_mib")(lambda r: _mib(r.get("host_peak_bytes")))
one("frag_unallocated_mib")(lambda r: _mib(m.frag_unallocated(r)))
one("frag_reserved_mib")(lambda r: _mib((r.get("end") or {}).get("reserved_bytes")))
one("frag_allocated_mib")(lambda r: _mib((r.get("end") or {}).get("allocated_bytes")))
one("phase_growth_mib", needs=("step", "phase"))(lambda r, step, phase: _mib(m.phase_growth(r, step, phase)))


@one("category_share_pct", needs=("category",))
def _share(r, category):
    value = m.category_share(r, category)
    return None if value is None else value * 100


@one("category_per", needs=("category", "per"))
def _per(r, category, per):
    """One category in units of another in the same run ("Adam's state is twice the parameters")."""
    return _over(m.category_bytes(r, category), m.category_bytes(r, per))


@one("phase_peak_mib", needs=("step", "phase"))
def phase_peak_mib(r, step, phase):
    value = m.phase_peak(r, step, phase)
    return None if value is None else (value - (r.get("baseline_bytes") or 0)) / MIB


@one("phase_peak_ratio", needs=("step", "phase", "versus_step"))
def _phase_ratio(r, step, phase, versus_step):
    """Sizes cancel: a claim such as "step 1's backward peaks far below step 2's" holds at any scale."""
    return _over(phase_peak_mib(r, step, phase), phase_peak_mib(r, versus_step, phase))


@one("phase_peak_gap_params", needs=("step", "phase", "versus_step"))
def _phase_gap(r, step, phase, versus_step):
    """How much higher a phase peaks in versus_step than in step, in parameter units ("step 1's backward is lower
    because Adam's state, twice the parameters, did not exist yet")."""
    a, b, params = m.phase_peak(r, step, phase), m.phase_peak(r, versus_step, phase), m.parameter_bytes(r)
    return None if a is None or b is None or not params else (b - a) / params


@one("step_spread_pct")
def _spread(r):
    s = r.get("step_ms") or {}
    return None if not s.get("median") else (s["p90"] - s["p10"]) / s["median"] * 100


@one("tflops_share_pct")
def _tflops_share(r):
    """The achieved rate as a share of what the device reaches on large matmuls at this precision."""
    tflops, rate = r.get("tflops"), m.device_rate(r)
    return None if not tflops or not rate else tflops / rate * 100


@one("profile_params", needs=("row", "column"))
def _profile_params(r, row, column):
    return _over(m.profile_bytes(r, row, column), m.config_parameter_bytes(r.get("config") or {}))


def _profile_mib(key: str):
    def read(r, row):
        found = m.profile_row(r, row)
        return None if found is None or key not in found else found[key] / MIB

    return read


one("profile_self_mib", needs=("row",))(_profile_mib("self_device_memory_bytes"))
one("profile_total_mib", needs=("row",))(_profile_mib("device_memory_bytes"))
one("leak_growth_kib")(lambda r: _kib(m.leak_growth(r)))
one("leak_gc_freed_kib")(lambda r: _kib(r.get("gc_freed_bytes")))


@one("gc_freed_per_step")
def _gc_freed(r):
    """What gc.collect() freed after the loop, in one kept model output per step: 1 when every step left one output in
    a reference cycle, 0 when what the loop keeps is still referenced (a real leak) or nothing."""
    value, unit, rows = r.get("gc_freed_bytes"), m.output_bytes(r), r.get("per_step") or []
    steps = rows[-1]["step"] if rows else 0
    return None if value is None or not unit or not steps else value / steps / unit


@one("driver_outside_mib")
def _driver_outside(r):
    """What the driver reports in use on the device beyond what PyTorch's allocator reserved (at the end of the
    measured steps): the CUDA context, NCCL's own buffers, other processes' contexts on that GPU."""
    driver, rows = r.get("driver") or {}, r.get("phases") or []
    reserved = rows[-1].get("reserved_bytes") if rows else None
    if not driver or reserved is None:
        return None
    return (driver["total_bytes"] - driver["free_bytes"] - reserved) / MIB


# ---------------------------------------------------------------------------------------------- a rounds result


def _strategy(r, strategy) -> dict | None:
    rows = [s for s in r.get("strategies") or [] if s.get("id") == strategy]
    return rows[0] if rows else None


one("round_median_ms", needs=("strategy",))(lambda r, strategy: (_strategy(r, strategy) or {}).get("median_ms"))
for _name, _field in m.PAIRED_FIELDS.items():
    one(_name, needs=("strategy", "versus"))(
        lambda r, strategy, versus, field=_field: (m.paired(r, strategy, versus) or {}).get(field)
    )


@one("round_separation_pct", needs=("strategy", "versus"))
def _separation(r, strategy, versus):
    """Unpaired, to show what pairing adds: > 0 when the strategy's fastest round is slower than the other's slowest,
    by this % of the other's median; <= 0 when their ranges over rounds overlap."""
    a, b = _strategy(r, strategy), _strategy(r, versus)
    if not a or not b or not b.get("median_ms"):
        return None
    return (a["min_ms"] - b["max_ms"]) / b["median_ms"] * 100


@one("round_spread_pct", needs=("strategy",))
def _round_spread(r, strategy):
    row = _strategy(r, strategy)
    if not row or not row.get("median_ms"):
        return None
    return (max(row["round_ms"]) - min(row["round_ms"])) / row["median_ms"] * 100


# ---------------------------------------------------------------------------------------------- against a baseline


def _saved(baseline: dict, result: dict) -> int | None:
    tech, base = m.net_peak(result), m.net_peak(baseline)
    return None if base is None or tech is None else base - tech


@pair("peak_saving_pct")
def peak_saving_pct(r, base):
    tech, before = m.net_peak(r), m.net_peak(base)
    if not before or tech is None or r.get("oom") or base.get("oom"):
        return None
    return (before - tech) / before * 100


pair("peak_ratio")(lambda r, base: _over(m.net_peak(r), m.net_peak(base)))
pair("saved_mib")(lambda r, base: _mib(_saved(base, r)))
pair("step_time_ratio")(lambda r, base: _over(m.step_ms(r), m.step_ms(base)))


@pair("phase_peak_pair_ratio", needs=("step", "phase"))
def _phase_pair(r, base, step, phase):
    return _over(phase_peak_mib(r, step, phase), phase_peak_mib(base, step, phase))


@pair("saved_per_category", needs=("category",))
def _saved_per_category(r, base, category):
    """The peak saved, in units of one category of the baseline ("it fell by more than Adam's two states")."""
    return _over(_saved(base, r), m.category_bytes(base, category))


@pair("saved_outputs")
def _saved_outputs(r, base):
    """The peak saved, in fp32 layer outputs of the run ("in-place ReLU removes only that one tensor")."""
    return _over(_saved(base, r), m.output_unit_bytes(r))


@pair("saving_vs_category", needs=("category",))
def _saving_vs_category(r, base, category):
    """The peak's relative saving over the category's relative saving: below 1 when the rest of the peak stays."""
    peak = peak_saving_pct(r, base)
    tech, before = m.category_bytes(r, category), m.category_bytes(base, category)
    if peak is None or tech is None or not before or before == tech:
        return None
    return peak / ((before - tech) / before * 100)


@pair("saving_ratio", needs=("versus", "versus_baseline"))
def _saving_ratio(r, base, versus, versus_baseline):
    """What one change saves on top of another, over what it saves alone: below 1, the two overlap."""
    return _over(_saved(base, r), _saved(versus_baseline, versus))


pair("category_ratio", needs=("category",))(
    lambda r, base, category: _over(m.category_bytes(r, category), m.category_bytes(base, category))
)

ONE_RUN = frozenset(n for n, x in REGISTRY.items() if x.runs == 1)
PAIR = frozenset(n for n, x in REGISTRY.items() if x.runs == 2)
