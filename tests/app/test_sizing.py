"""Without a GPU, a lesson page starts CPU-sized, says so, names the sized values in its prompts, and switches
to the full size and back (app/ui/sizing.py)."""

from __future__ import annotations

from course import content
from tests.app.pages import open_page, run_until


def _markdown(at) -> str:
    return "\n".join(m.value for m in at.markdown)


def test_a_cpu_page_starts_sized_and_its_prompts_name_the_sized_values():
    # The sized values from the lesson's own data, not from course/content.py's sizing, which the page runs: width
    # and batch divided by its cpu_scale.
    meta = content.meta("monitoring")
    k = meta["cpu_scale"]
    full = meta["preset"]
    small = {"width": full["width"] // k, "batch": full["batch"] // k}
    assert k > 1 and small["width"] < full["width"] and small["batch"] < full["batch"]
    at = open_page("monitoring", state={"monitoring_steps": 2, "monitoring_timing_steps": 1})
    assert any(f"{k}× smaller" in i.value for i in at.info), [i.value for i in at.info]
    assert at.select_slider(key="monitoring_width").value == small["width"]
    assert at.select_slider(key="monitoring_batch").value == small["batch"]
    # The link names the sized values, so it opens the same experiment on a server with a GPU.
    assert at.query_params["monitoring_width"] == str(small["width"])
    at.button(key="monitoring.run").click().run()
    run_until(at, lambda a: "monitoring.done" in a.session_state)
    assert not at.exception, [e.value for e in at.exception]
    sized_batch = meta["prompts"]["breakdown"]["try_change"]["batch"] // k
    assert f"Raise batch to {sized_batch} and run again" in _markdown(at)
    at.button(key="monitoring.apply.breakdown").click().run()
    assert at.select_slider(key="monitoring_batch").value == sized_batch

    at.button(key="monitoring.sizing.full").click().run()
    assert at.select_slider(key="monitoring_width").value == full["width"]
    assert at.select_slider(key="monitoring_batch").value == full["batch"]
    assert "monitoring_width" not in at.query_params
    assert not any(f"{k}× smaller" in i.value for i in at.info)
    at.button(key="monitoring.sizing.cpu").click().run()
    assert at.select_slider(key="monitoring_width").value == small["width"]


def test_a_hostile_link_value_replaced_by_the_default_is_said_on_the_page():
    at = open_page("monitoring", query={"monitoring_batch": "-1e9'; DROP", "monitoring_width": "128"})
    warnings = [w.value for w in at.warning if "monitoring_batch" in w.value]
    assert len(warnings) == 1 and "-1e9'; DROP" in warnings[0] and "default" in warnings[0], [
        w.value for w in at.warning
    ]
    assert at.select_slider(key="monitoring_width").value == 128  # a good value of the same link is kept
    zh = open_page("monitoring", lang="zh", query={"monitoring_batch": "abc"})
    assert any("monitoring_batch" in w.value and "默认值" in w.value for w in zh.warning)
