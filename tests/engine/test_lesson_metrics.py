"""The figures lessons quote, read off results: each against a count made by hand from the result it reads."""

from __future__ import annotations

import pytest

from course import expectations, facts
from experiments.core import named_metrics
from experiments.core.config import ConfigError

MIB = 2**20


def test_larger_fits_counts_the_allocations_after_the_last_free():
    run = {"points": [{"op": "alloc"}] * 4 + [{"op": "free"}] * 2 + [{"op": "alloc"}] * 3 + [{"op": "oom"}]}
    assert named_metrics.scalar("frag_larger_fits", run) == 3
    assert named_metrics.scalar("frag_larger_fits", {"points": [{"op": "alloc"}]}) is None  # nothing was freed


def test_state_bytes_per_parameter_of_fp32_adam_and_a_zero3_rank():
    params = 1000 * 4  # 1000 fp32 parameters, as the model phase allocates them
    single = {
        "config": {"precision": "fp32"},
        "baseline_bytes": 0,
        "phases": [{"step": 0, "phase": "model", "allocated_bytes": params}],
        "breakdown_steady": {"parameters": params, "gradients": params, "optimizer_state": 2 * params, "data": 999},
    }
    assert named_metrics.scalar("state_bytes_per_param", single) == 16
    rank = dict(
        single,
        breakdown_steady={
            "parameters": params // 2,
            "gradients": params // 2,
            "optimizer_state": params,
            "communication": 123,
        },
    )
    assert named_metrics.scalar("state_bytes_per_param", rank) == 8  # 16Ψ/N at N = 2
    bf16 = dict(
        single,
        config={"precision": "bf16"},
        phases=[{"step": 0, "phase": "model", "allocated_bytes": 2000}],
        breakdown_steady={"parameters": 2000, "gradients": 2000, "optimizer_state": 4000},
    )
    assert named_metrics.scalar("state_bytes_per_param", bf16) == 8


def test_profile_rows_and_the_check_that_reads_them():
    profile = {
        "rows": [{"name": "Optimizer.step#Adam.step", "self_device_memory_bytes": -32 * MIB, "device_memory_bytes": 0}]
    }
    assert named_metrics.scalar("profile_self_mib", profile, row="Optimizer.step") == -32
    assert named_metrics.scalar("profile_total_mib", profile, row="Optimizer.step") == 0
    assert named_metrics.scalar("profile_self_mib", profile, row="aten::mm") is None
    # The check from both sides of its bound: -32 MiB is at most -16, and not at most -64 nor at least -16.
    check = {"check": "value", "metric": "profile_self_mib", "row": "Optimizer.step", "max": -16}
    assert expectations.evaluate_one(check, {"run": profile})["holds"] is True
    for other in ({"max": -64}, {"min": -16}):
        off = {**{k: v for k, v in check.items() if k != "max"}, **other}
        assert expectations.evaluate_one(off, {"run": profile})["holds"] is False, other
    with pytest.raises(expectations.ExpectationError, match="row"):
        expectations.validate({"check": "value", "metric": "profile_self_mib", "max": 0})
    spec = {"metric": "profile_self_mib", "row": "Optimizer.step", "run": "p", "max": -16}
    assert facts.value(spec, {"p": profile}.get) == -32


def test_host_memory_and_what_the_driver_holds_beyond_the_allocator():
    result = {
        "host_peak_bytes": 64 * MIB,
        "driver": {"total_bytes": 100 * MIB, "free_bytes": 40 * MIB},
        "phases": [{"reserved_bytes": 10 * MIB}],
    }
    assert named_metrics.scalar("host_mib", result) == 64
    assert named_metrics.scalar("driver_outside_mib", result) == 50  # 60 in use, 10 of it PyTorch's
    assert (
        named_metrics.scalar("host_mib", {}) is None
        and named_metrics.scalar("driver_outside_mib", {"phases": []}) is None
    )


def test_a_fact_can_read_one_allocator_setting_of_a_fragmentation_run():
    frag = {
        "runs": {
            "standard": {"points": [{"op": "free"}, {"op": "alloc"}]},
            "expandable": {"points": [{"op": "free"}] + [{"op": "alloc"}] * 4},
        }
    }
    spec = {"metric": "frag_larger_fits", "run": "f", "allocator": "expandable", "min": 3}
    assert facts.value(spec, {"f": frag}.get) == 4
    assert facts.value(dict(spec, allocator="standard"), {"f": frag}.get) == 1


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"pattern": "sieve"}, "pattern"),
        ({"pattern": "carved", "size_mb": 0}, "size_mb"),
        ({"pattern": "carved", "budget_mb": -1}, "budget_mb"),
        ({"pattern": "carved", "device": "cpu"}, "device"),
    ],
)
def test_fragmentation_bad_input_names_the_field(kwargs, field):
    from experiments.labs.fragmentation import run_fragmentation

    with pytest.raises(ConfigError) as err:
        run_fragmentation(**kwargs)
    assert err.value.field == field


def test_what_gc_collect_freed_after_a_leak_run():
    run = {
        "batch": 64,
        "width": 512,
        "gc_freed_bytes": 10 * 64 * 512 * 4,
        "per_step": [{"step": i, "allocated_bytes": 0} for i in range(11)],
    }
    assert named_metrics.scalar("leak_gc_freed_kib", run) == 1280
    assert named_metrics.scalar("gc_freed_per_step", run) == 1  # one output per step, as a reference cycle leaves it
    assert named_metrics.scalar("gc_freed_per_step", dict(run, gc_freed_bytes=0)) == 0
    assert (
        named_metrics.scalar("gc_freed_per_step", {"batch": 64, "width": 512}) is None
    )  # recorded before it was measured


def test_the_reference_cycle_scenario_is_freed_by_gc_collect_and_a_real_leak_is_not():
    """Each step's output held by an object that refers to itself: it grows like cached outputs, yet gc.collect()
    frees all of it; the cached outputs are still referenced by the module, so gc.collect() frees nothing."""
    import gc

    from experiments.labs.leaks import run_leak

    enabled = gc.isenabled()
    out = 64 * 512 * 4
    cycle = run_leak("reference_cycle", steps=6, device="cpu")
    cached = run_leak("cache_outputs", steps=6, device="cpu")
    assert cycle["growth_bytes_per_step"] == cached["growth_bytes_per_step"] == out
    assert cycle["gc_freed_bytes"] == 6 * out and cached["gc_freed_bytes"] == 0
    assert gc.isenabled() == enabled  # the run turned the collector off for itself only


def test_the_registry_says_what_each_figure_reads_and_refuses_what_it_lacks():
    """One place says which runs and arguments a figure needs: scalar() and the checks' validation both read it."""
    from course import expectations

    assert named_metrics.REGISTRY["peak_ratio"].runs == 2 and named_metrics.REGISTRY["net_peak_mib"].runs == 1
    assert named_metrics.REGISTRY["phase_peak_ratio"].needs == ("step", "phase", "versus_step")
    with pytest.raises(KeyError, match="unknown metric"):
        named_metrics.scalar("no_such_metric", {})
    with pytest.raises(KeyError, match="give a baseline"):
        named_metrics.scalar("peak_ratio", {"peak_bytes": 1})
    run = {"peak_bytes": 3 * 2**20, "baseline_bytes": 2**20}
    base = {"peak_bytes": 5 * 2**20, "baseline_bytes": 2**20}
    assert named_metrics.scalar("peak_ratio", run, base) == 0.5  # net peaks: 2 MiB over 4 MiB
    assert named_metrics.scalar("saved_mib", run, base, category="unused") == 2  # extra arguments are ignored
    assert expectations.PHASE_METRICS == {n for n, m in named_metrics.REGISTRY.items() if "phase" in m.needs}
    with pytest.raises(expectations.ExpectationError, match="round_median_ms needs strategy"):
        expectations.validate({"check": "value", "metric": "round_median_ms", "min": 1})
