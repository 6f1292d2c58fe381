"""The sandbox: invalid settings give a message, Run gives charts and tables."""

from __future__ import annotations

from app import backend
from course.units import MIB, fmt_bytes
from experiments.core.config import ExperimentConfig
from experiments.estimate.estimator import estimate
from tests.app.pages import open_page, run_until, small_config


def test_batch_not_divisible_by_accum_shows_an_error():
    state = small_config("monitoring") | {"monitoring_batch": 2, "monitoring_accum": 4}
    at = open_page("monitoring", state=state)
    assert not at.exception
    assert any("divisible" in e.value for e in at.error), [e.value for e in at.error]
    assert at.button(key="monitoring.run").disabled
    # The error offers valid values; taking one makes the config valid again.
    at.button(key="monitoring.fix_b4").click().run()
    assert at.select_slider(key="monitoring_batch").value == 4
    assert not at.button(key="monitoring.run").disabled


def test_switching_lesson_1_to_the_transformer_keeps_the_config_valid():
    """Lesson 1's width (1000, 250 at CPU size) is no multiple of 8 heads x 8: choosing the transformer must not
    open on an error with Run disabled."""
    at = open_page("monitoring")
    assert at.select_slider(key="monitoring_width").value % 64
    at.selectbox(key="monitoring_model").set_value("transformer").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    width, heads = at.select_slider(key="monitoring_width").value, at.select_slider(key="monitoring_heads").value
    assert width % (heads * 8) == 0
    assert not at.button(key="monitoring.run").disabled


def test_chinese_error_message_does_not_crash():
    state = small_config("exercise1") | {"exercise1_batch": 2, "exercise1_accum": 4}
    at = open_page("exercise1", lang="zh", state=state)
    assert not at.exception
    assert at.error


def _done(ns):
    return lambda at: f"{ns}.done" in at.session_state


def test_run_shows_charts_and_tables():
    at = open_page("monitoring", state=small_config("monitoring"))
    charts_before = len(at.get("vega_lite_chart"))
    at.button(key="monitoring.run").click().run()
    run_until(at, _done("monitoring"))
    assert not at.exception
    assert not [e.value for e in at.error if "Something went wrong" in e.value]
    assert len(at.get("vega_lite_chart")) >= charts_before + 3  # memory, breakdown, step time
    assert at.dataframe, "the phase table"
    specs = [c.proto.spec for c in at.get("vega_lite_chart")]
    assert any("Allocated at end" in s for s in specs)
    # Changing a setting afterwards keeps the results and says they are stale.
    at.select_slider(key="monitoring_width").set_value(128).run()
    assert any("previous configuration" in w.value for w in at.warning)


def test_leak_run_shows_growth_chart():
    state = {
        "leaks_leak_scenarios": ["append_loss_after_backward", "fixed"],
        "leaks_leak_steps": 3,
        "leaks_leak_batch": 8,
        "leaks_leak_width": 64,
        "leaks_leak_device": "cpu",
    }
    at = open_page("leaks", state=state)
    at.button(key="leaks_leak.run").click().run()
    run_until(at, _done("leaks_leak"))
    assert not at.exception
    assert not at.error, [e.value for e in at.error]
    assert any("Allocated (MiB)" in c.proto.spec for c in at.get("vega_lite_chart"))


def test_out_of_memory_is_a_lesson_not_a_crash():
    state = small_config("monitoring") | {
        "monitoring_width": 512,
        "monitoring_batch": 256,
        "monitoring_budget_mb": 1.0,
        "monitoring_force": True,
    }
    at = open_page("monitoring", state=state)
    assert any("not to fit" in w.value for w in at.warning)
    at.button(key="monitoring.run").click().run()
    run_until(
        at,
        lambda a: (
            any("Out of memory" in e.value for e in a.error)
            or any("Something went wrong" in e.value or "failed" in e.value for e in a.error)
        ),
    )
    assert not at.exception
    assert any("Out of memory" in e.value for e in at.error), [e.value for e in at.error]
    # Two layers of width 512 hold 2 MiB of parameters alone: no batch fits the 1 MiB budget.
    assert any(i.value.startswith("Even the smallest batch is estimated not to fit into 1.00 MiB") for i in at.info)


def test_refused_run_explains_force():
    # Activations dominate at width 64, batch 16384 (about 28 MiB): a 4 MiB budget refuses it, a smaller batch fits.
    state = small_config("monitoring") | {
        "monitoring_width": 64,
        "monitoring_batch": 16384,
        "monitoring_budget_mb": 4.0,
    }
    at = open_page("monitoring", state=state)
    at.button(key="monitoring.run").click().run()
    run_until(at, lambda a: "monitoring.done" in a.session_state)
    assert not at.exception and not at.error, [e.value for e in at.error]
    # In the page's units and language, with what would fit, not the engine's raw WouldNotFit text: the estimate
    # of the configuration the page ran, computed here, against the 4 MiB budget.
    ran = ExperimentConfig.from_dict(at.session_state["monitoring.done"]["tag"])
    peak = estimate(ran, capacity_bytes=4 * MIB, device_type=backend.device_type(ran))["peak_bytes"]
    warning = " ".join(w.value for w in at.warning)
    assert f"Not run: the estimated peak, {fmt_bytes(peak)}, is well above the 4.00 MiB available." in warning, warning
    assert any(i.value.startswith("What would fit: by the estimate, batch") for i in at.info), [
        i.value for i in at.info
    ]
    assert any("Run even if the estimate" in c.value for c in at.caption)
    # One press sets the batch that would fit; Run then confirms it with a real run.
    button = next(b for b in at.button if b.label.startswith("Use batch"))
    batch = int(button.label.split()[2].rstrip(","))
    button.click().run()
    assert at.select_slider(key="monitoring_batch").value == batch


def test_cancel_stops_a_running_job():
    state = small_config("monitoring") | {
        "monitoring_width": 1024,
        "monitoring_batch": 512,
        "monitoring_steps": 10,
        "monitoring_timing_steps": 50,
    }
    at = open_page("monitoring", state=state)
    at.button(key="monitoring.run").click().run()
    assert at.button(key="monitoring.cancel"), "a running job offers Cancel"
    at.button(key="monitoring.cancel").click().run()
    run_until(at, lambda a: not any(b.key == "monitoring.cancel" for b in a.button))
    assert not at.exception
    assert any("ancel" in w.value for w in at.warning), [w.value for w in at.warning]


def test_one_click_submits_once_and_shows_its_progress_in_the_same_run():
    # A configuration no other test runs: the worker serves a result it has already made from its cache at once, and
    # then there is no pending run for the second click to meet.
    state = small_config("monitoring") | {
        "monitoring_width": 1016,
        "monitoring_batch": 504,
        "monitoring_steps": 10,
        "monitoring_timing_steps": 50,
    }
    at = open_page("monitoring", state=state)
    at.button(key="monitoring.run").click().run()
    group = at.session_state["monitoring.jobs"]
    # The progress (and its Cancel) is drawn by the run the click caused, not by a second full run.
    assert at.button(key="monitoring.cancel")
    assert any("Training run" in m.value for m in at.markdown), [m.value for m in at.markdown]
    at.button(key="monitoring.run").click().run()  # a second click while the first run's group is pending
    assert at.session_state["monitoring.jobs"]["ids"] == group["ids"]
    at.button(key="monitoring.cancel").click().run()
    run_until(at, lambda a: "monitoring.jobs" not in a.session_state)


def test_engine_rules_are_explained_in_chinese():
    state = small_config("analysis") | {"analysis_model": "transformer", "analysis_width": 64, "analysis_heads": 16}
    at = open_page("analysis", lang="zh", state=state)
    assert not at.exception
    assert any("8 的倍数" in e.value for e in at.error), [e.value for e in at.error]
