"""The lesson prompts check themselves against the run they sit under (app/expect_view.py)."""

from __future__ import annotations

import json

import pytest
from conftest import open_page, run_until

TINY = {"model": "mlp", "layers": 2, "width": 64, "batch": 16, "steps": 2, "timing_steps": 2, "optimizer": "adam"}
HOLDS = "Adam's state appears in step 1's optimizer_step."
FAILS = "The peak is in the data phase."


@pytest.fixture
def tiny_monitoring(tmp_path, monkeypatch):
    folder = tmp_path / "monitoring"
    folder.mkdir()
    (folder / "lesson.en.md").write_text("### Tiny\n\nThe recorded peak was {{tiny_fact}} MiB.\n")
    meta = {
        "title": {"en": "Monitoring", "zh": "监控"},
        "preset": TINY,
        "facts": {"tiny_fact": {"metric": "net_peak_mib", "run": "monitoring-preset", "format": ".1f"}},
        "prompts": {
            "memory": {
                "notice": {"en": HOLDS, "zh": HOLDS},
                "expect": [{"check": "phase_growth", "step": 1, "phase": "optimizer_step", "min": 1.5, "max": 2.5}],
                "try": {"en": "Switch to SGD.", "zh": "换成 SGD。"},
                "try_change": {"optimizer": "sgd"},
                "try_expect": [{"check": "value", "metric": "category_ratio", "category": "optimizer_state",
                                "run": "changed", "baseline": "run", "max": 0}],
            },
            "breakdown": {
                "notice": {"en": FAILS, "zh": FAILS},
                "expect": [{"check": "peak_phase", "is": ["data"]}],
                "try": {"en": "Nothing.", "zh": "无。"}, "try_expect": [],
            },
        },
    }
    (folder / "meta.json").write_text(json.dumps(meta))
    monkeypatch.setenv("GPU_MEMORY_LAB_LESSONS", str(tmp_path))
    return tmp_path


def _markdown(at) -> str:
    return "\n".join(m.value for m in at.markdown)


def test_a_prompt_is_shown_when_the_run_bears_it_out_and_corrected_when_not(tiny_monitoring):
    at = open_page("monitoring")
    at.button(key="monitoring.run").click().run()
    run_until(at, lambda a: "monitoring.done" in a.session_state)
    assert not at.exception, [e.value for e in at.exception]
    text = _markdown(at)
    assert HOLDS in text
    assert any(c.value == "Checked against this run." for c in at.caption)
    # The breakdown note is false for this run: the page says what the run shows instead, not the note.
    assert "this run does not show what the lesson's note describes" in text
    assert "the peak is in" in text and FAILS not in text.split("this run does not show")[1].split("\n")[1]


def test_apply_sets_the_suggested_change_and_the_next_run_checks_the_prediction(tiny_monitoring):
    at = open_page("monitoring")
    at.button(key="monitoring.run").click().run()
    run_until(at, lambda a: "monitoring.done" in a.session_state)
    at.button(key="monitoring.apply.memory").click().run()
    assert at.selectbox(key="monitoring_optimizer").value == "sgd"
    first = at.session_state["monitoring.done"]
    at.button(key="monitoring.run").click().run()
    run_until(at, lambda a: a.session_state["monitoring.done"] is not first and "monitoring.jobs" not in a.session_state)
    assert not at.exception, [e.value for e in at.exception]
    assert any("shows what the prompt predicted" in s.value for s in at.success)


def test_facts_fill_lesson_prose_from_recorded_results(tiny_monitoring):
    at = open_page("monitoring")
    text = _markdown(at)
    assert "{{tiny_fact}}" not in text
    from experiments.metrics import net_peak
    from experiments.recorded import load_recorded

    assert f"The recorded peak was {net_peak(load_recorded('monitoring-preset')) / 2**20:.1f} MiB." in text
