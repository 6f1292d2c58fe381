"""The claim checks themselves: a check that cannot be evaluated is reported, never silently passed; every new
figure agrees with an independent computation (a recording changed to contradict a sentence:
test_expectation_mutations.py)."""

from __future__ import annotations

import copy

import pytest

from course import expectations
from course.units import MIB
from experiments.core import metrics, named_metrics
from experiments.core.recorded import load_recorded


def _recorded(rid: str) -> dict:
    return copy.deepcopy(load_recorded(rid))


# --- a check that has nothing to read is "not applied", and that is not a pass ---


def test_a_missing_run_is_unapplied_and_withholds_the_verdict():
    run = _recorded("optimization-preset")
    outcomes = expectations.evaluate(
        [
            {"check": "peak_phase", "is": ["backward"]},
            {"check": "value", "metric": "peak_ratio", "run": "changed", "baseline": "run", "max": 0.8},
        ],
        {"run": run},
    )
    assert outcomes[0]["holds"] is True
    assert [o["missing"] for o in expectations.unapplied(outcomes)] == ["changed"]
    # A sibling that holds does not make the prompt "checked".
    assert expectations.verdict(outcomes) is None


def test_a_device_skip_is_not_unapplied():
    run = _recorded("optimization-preset")
    outcomes = expectations.evaluate(
        [
            {"check": "peak_phase", "is": ["backward"]},
            {"check": "value", "metric": "step_ms", "max": 10, "devices": ["cpu"]},
        ],
        {"run": run},
    )
    assert outcomes[1]["skipped"] == "device" and not expectations.unapplied(outcomes)
    assert expectations.verdict(outcomes) is True
    only_skipped = expectations.evaluate([outcomes[1]["spec"]], {"run": run})
    assert expectations.verdict(only_skipped) is None  # nothing was confirmed


def test_a_missing_figure_is_unapplied():
    run = _recorded("optimization-preset")
    run["step_ms"] = None
    outcomes = expectations.evaluate([{"check": "value", "metric": "step_ms", "max": 10}], {"run": run})
    assert expectations.unapplied(outcomes) and expectations.verdict(outcomes) is None


def test_an_absent_category_is_not_zero_and_does_not_pass_a_share_maximum():
    run = _recorded("analysis-preset")
    del run["breakdown"]["activations"]
    check = {"check": "share", "category": "activations", "max": 0.01}
    outcome = expectations.evaluate_one(check, {"run": run})
    assert outcome["holds"] is None and expectations.unapplied([outcome])
    assert metrics.category_bytes(run, ["parameters", "activations"]) is None
    # "other" is written by the runner only when positive: on a GPU its absence means 0 bytes.
    del run["breakdown"]["other"]
    assert metrics.category_bytes(run, "other") == 0
    assert metrics.category_bytes(dict(run, device={"type": "cpu"}), "other") is None


def test_a_failing_check_outweighs_an_unapplied_one():
    run = _recorded("optimization-preset")
    outcomes = expectations.evaluate(
        [
            {"check": "peak_phase", "is": ["data"]},
            {"check": "value", "metric": "peak_ratio", "run": "changed", "baseline": "run", "max": 0.8},
        ],
        {"run": run},
    )
    assert expectations.verdict(outcomes) is False


def test_bad_checks_name_the_field():
    with pytest.raises(expectations.ExpectationError, match="largest_category.is"):
        expectations.validate({"check": "largest_category", "is": ["weights"]})
    with pytest.raises(expectations.ExpectationError, match="category_per needs 'per'"):
        expectations.validate({"check": "value", "metric": "category_per", "category": "gradients", "min": 1})
    with pytest.raises(expectations.ExpectationError, match="profile_params needs a row"):
        expectations.validate(
            {"check": "value", "metric": "profile_params", "row": "Optimizer.step", "column": "children", "max": 0}
        )
    with pytest.raises(expectations.ExpectationError, match="phase_peak_gap_params needs an int versus_step"):
        expectations.validate(
            {"check": "value", "metric": "phase_peak_gap_params", "step": 1, "phase": "backward", "min": 1}
        )
    with pytest.raises(expectations.ExpectationError, match="share.category"):
        expectations.validate({"check": "share", "category": ["parameters", "weights"], "max": 1})


# --- the new figures against independent computations ---


def test_category_per_and_sums_of_categories():
    run = _recorded("analysis-preset")
    b = run["breakdown"]
    assert (
        named_metrics.scalar("category_per", run, category="optimizer_state", per="parameters")
        == b["optimizer_state"] / b["parameters"]
    )
    assert metrics.category_share(run, ["parameters", "gradients"]) == (b["parameters"] + b["gradients"]) / sum(
        b.values()
    )


def test_largest_category_names_the_biggest_slice():
    run = _recorded("optimization-preset")  # activations are about half of this peak
    check = {"check": "largest_category", "is": ["activations"]}
    assert expectations.evaluate_one(check, {"run": run})["holds"] is True
    run["breakdown"]["optimizer_state"] = run["breakdown"]["activations"] + 1
    outcome = expectations.evaluate_one(check, {"run": run})
    assert outcome["holds"] is False and outcome["actual"] == "optimizer_state"


def test_tflops_share_uses_the_rate_of_the_runs_precision():
    fp32, amp = _recorded("optimization-amp_speed_large-baseline"), _recorded("optimization-amp_speed_large-config")
    assert (
        named_metrics.scalar("tflops_share_pct", fp32)
        == fp32["tflops"] / fp32["device"]["rates"]["tflops"]["fp32"] * 100
    )
    assert (
        named_metrics.scalar("tflops_share_pct", amp) == amp["tflops"] / amp["device"]["rates"]["tflops"]["bf16"] * 100
    )
    cnn = dict(fp32, config=dict(fp32["config"], model="cnn"))  # cuDNN convolutions use TF32 by default
    assert metrics.device_rate(cnn) == fp32["device"]["rates"]["tflops"]["tf32"]


def test_phase_peak_gap_is_adams_state_in_parameter_units():
    run = _recorded("analysis-try-memory")
    step1 = max(p["peak_bytes"] for p in run["phases"] if p["step"] == 1 and p["phase"] == "backward")
    step2 = max(p["peak_bytes"] for p in run["phases"] if p["step"] == 2 and p["phase"] == "backward")
    params = run["breakdown"]["parameters"]
    gap = named_metrics.scalar("phase_peak_gap_params", run, step=1, versus_step=2, phase="backward")
    assert gap == pytest.approx((step2 - step1) / params, rel=1e-3)


def test_profile_rows_in_parameter_units():
    profile = _recorded("analysis-profile")
    config = profile["config"]
    params = config["layers"] * (config["width"] ** 2 + config["width"]) * 4
    row = next(r for r in profile["rows"] if r["name"].startswith("Optimizer.zero_grad"))
    assert (
        named_metrics.scalar("profile_params", profile, row="Optimizer.zero_grad", column="self")
        == row["self_device_memory_bytes"] / params
    )
    assert named_metrics.scalar("profile_params", profile, row="no such operator", column="self") is None


def test_saved_outputs_counts_fp32_layer_outputs():
    base = _recorded("optimization-inplace-baseline")
    tech = copy.deepcopy(base)
    unit = base["config"]["batch"] * base["config"]["width"] * 4
    tech["peak_bytes"] -= 3 * unit
    assert named_metrics.scalar("saved_outputs", tech, base) == pytest.approx(3)


def test_breakdown_sums_to_peak_holds_on_a_recording_and_fails_when_a_category_is_off():
    run = _recorded("optimization-preset")
    check = {"check": "breakdown_sums_to_peak"}
    assert expectations.evaluate_one(check, {"run": run})["holds"] is True
    assert expectations.evaluate_one(dict(check, source="estimated"), {"run": run})["holds"] is True
    run["breakdown"]["activations"] += MIB // 50  # 0.02 MiB: more than the page's two decimals hide
    outcome = expectations.evaluate_one(check, {"run": run})
    assert outcome["holds"] is False and outcome["actual"] == (MIB // 50) / MIB


def test_a_gpu_only_check_on_a_run_that_exists_only_on_gpus_is_a_device_skip_beside_cpu_runs():
    """Lesson 6's CPU offload runs on GPUs only, so the CPU recordings have no such run: its GPU-only checks are
    device skips there. The same run missing beside GPU runs is missing, and so is a check without a devices rule."""
    check = {
        "check": "value",
        "metric": "peak_ratio",
        "run": "offload",
        "baseline": "zero3",
        "max": 0.5,
        "devices": ["cuda"],
    }
    cpu, gpu = {"device": {"type": "cpu"}, "peak_bytes": 1}, {"device": {"type": "cuda"}, "peak_bytes": 1}
    assert expectations.evaluate_one(check, {"zero3": cpu}).get("skipped") == "device"
    assert expectations.evaluate_one(check, {"zero3": gpu}).get("missing") == "offload"
    assert expectations.evaluate_one(check, {"zero3": cpu, "other": gpu}).get("missing") == "offload"
    unruled = {k: v for k, v in check.items() if k != "devices"}
    assert expectations.evaluate_one(unruled, {"zero3": cpu}).get("missing") == "offload"
    assert expectations.unapplied(expectations.evaluate([check], {"zero3": gpu}))
