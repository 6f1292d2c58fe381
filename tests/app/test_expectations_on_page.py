"""The lesson prompts check themselves against the run they sit under (app/ui/expect_view.py)."""

from __future__ import annotations

import json

import pytest

from tests.app.pages import open_page, run_until

TINY = {"model": "mlp", "layers": 2, "width": 64, "batch": 16, "steps": 2, "timing_steps": 2, "optimizer": "adam"}
HOLDS = "Adam's state appears in step 1's optimizer_step."
FAILS = "The peak is in the data phase."
UNCHECKED = "The step takes some time and what is not a tensor is at most all of it."


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
                "try_expect": [
                    {
                        "check": "value",
                        "metric": "category_ratio",
                        "category": "optimizer_state",
                        "run": "changed",
                        "baseline": "run",
                        "max": 0,
                    }
                ],
            },
            "breakdown": {
                "notice": {"en": FAILS, "zh": FAILS},
                "expect": [{"check": "peak_phase", "is": ["data"]}],
                "try": {"en": "Nothing.", "zh": "无。"},
                "try_expect": [],
            },
            "time": {
                # The second check reads a category a CPU run does not have: not applied, so not "checked".
                "notice": {"en": UNCHECKED, "zh": UNCHECKED},
                "expect": [
                    {"check": "value", "metric": "step_ms", "min": 0},
                    {"check": "share", "category": "other", "max": 1},
                ],
                "try": {"en": "Nothing.", "zh": "无。"},
                "try_expect": [],
            },
        },
    }
    (folder / "meta.json").write_text(json.dumps(meta))
    monkeypatch.setenv("GPU_MEMORY_LAB_LESSONS", str(tmp_path))
    return tmp_path


def _markdown(at) -> str:
    return "\n".join(m.value for m in at.markdown)


def test_a_prompt_is_shown_when_the_run_bears_it_out_and_corrected_when_not(tiny_monitoring):
    at = open_page("monitoring", state={"recorded.monitoring.open": True})
    at.button(key="monitoring.run").click().run()
    run_until(at, lambda a: "monitoring.done" in a.session_state)
    assert not at.exception, [e.value for e in at.exception]
    text = _markdown(at)
    assert HOLDS in text
    cpu = at.session_state["monitoring.done"]["statuses"][0]["result"]["device"]["type"] == "cpu"
    # The prompts sit under this run and again under the recorded H200 run below it. Under the H200 run the memory
    # and time prompts are borne out; under a CPU run the time prompt's second check reads a category a CPU run
    # does not have, and that withholds its caption (it used to count as checked).
    assert [c.value for c in at.caption].count("Checked against this run.") == (1 if cpu else 2) + 2
    assert UNCHECKED in text
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
    run_until(
        at, lambda a: a.session_state["monitoring.done"] is not first and "monitoring.jobs" not in a.session_state
    )
    assert not at.exception, [e.value for e in at.exception]
    assert any("shows what the prompt predicted" in s.value for s in at.success)


def test_facts_fill_lesson_prose_from_recorded_results(tiny_monitoring):
    at = open_page("monitoring")
    text = _markdown(at)
    assert "{{tiny_fact}}" not in text
    from experiments.core.metrics import net_peak
    from experiments.core.recorded import load_recorded

    assert f"The recorded peak was {net_peak(load_recorded('monitoring-preset')) / 2**20:.1f} MiB." in text


@pytest.fixture
def analysis_lesson(tmp_path, monkeypatch):
    import shutil

    from course import content

    shutil.copytree(content.lessons_dir() / "analysis", tmp_path / "analysis")
    monkeypatch.setenv("GPU_MEMORY_LAB_LESSONS", str(tmp_path))
    return tmp_path / "analysis" / "meta.json"


def _open_recorded_profile():
    at = open_page("analysis", state={"recorded.analysis.open": True})
    at.selectbox(key="recorded.analysis").set_value("analysis-profile").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_the_recorded_profiler_table_is_checked_against_the_lessons_bullets(analysis_lesson):
    at = _open_recorded_profile()
    assert not [w for w in at.warning if w.value.startswith("This run does not show what the text above says")]
    checked = [c.value for c in at.caption].count("Checked against this run.")
    # A bullet this table contradicts ("Optimizer.zero_grad is negative" checked as positive) is reported under it.
    meta = json.loads(analysis_lesson.read_text())
    meta["profile_expect"][0] = dict(meta["profile_expect"][0], min=0, max=None)
    del meta["profile_expect"][0]["max"]
    analysis_lesson.write_text(json.dumps(meta))
    at = _open_recorded_profile()
    warned = [w.value for w in at.warning if w.value.startswith("This run does not show what the text above says")]
    assert warned and "in the profiler table" in warned[0]
    assert [c.value for c in at.caption].count("Checked against this run.") == checked - 1
