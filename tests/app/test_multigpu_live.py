"""Lesson 6's live run is shown as every lesson shows its run: the lesson's prompts under it, checked against it
(not against a recording), each rank's phases on a time axis drawn from what the result records, and the pin."""

from __future__ import annotations

import copy

import pytest

from app.charts import rank_phases
from app.features import data_parallel_live
from app.i18n import STRINGS
from course import content
from experiments.core.recorded import load_recorded
from tests.app.pages import open_page

NS = "multigpu"
META = content.meta("multigpu")


def _say(key: str, lang: str) -> str:
    en, zh = STRINGS[key]
    return zh if lang == "zh" else en


def _live(result: dict, lang: str):
    """The page with `result` as the live run that just finished (a real two-rank gloo result, as recorded)."""
    done = {
        "specs": [{"label": "live", "kind": "distributed", "params": result["distributed"]}],
        "statuses": [{"state": "done", "result": result, "cached": False}],
        "tag": None,
    }
    return open_page("multigpu", lang=lang, state={f"{NS}.done": done})


def _texts(block) -> list[str]:
    return [m.value for m in block.markdown]


def _outside_expanders(at) -> list[str]:
    inside = [v for e in at.expander for v in _texts(e)]
    out = list(_texts(at))
    for v in inside:
        out.remove(v)
    return out


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_live_run_has_the_lessons_prompts_checked_against_it(lang):
    result = load_recorded("multigpu-cpu-gloo-fsdp2_zero3")
    at = _live(result, lang)
    assert not at.exception
    notice = _say("prompt.notice", lang)
    live = [v for v in _outside_expanders(at) if v.startswith(f"**{notice}**")]
    assert len(live) == 3, live  # memory, breakdown and time, under the live run's charts
    differs = _say("expect.differs", lang)
    assert not [v for v in live if differs in v]  # as recorded, ZeRO-3's peak on gloo is in backward
    # The same run, had its peak been in the optimizer step: the breakdown prompt says so, of this run.
    moved = copy.deepcopy(result)
    moved["peak_phase"] = {"step": 2, "phase": "optimizer_step"}
    at = _live(moved, lang)
    assert not at.exception
    said = [v for v in _outside_expanders(at) if v.startswith(f"**{notice}**") and differs in v]
    assert len(said) == 1 and _say("phase.optimizer_step", lang) in said[0], said


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_live_run_has_a_per_rank_phase_timeline_and_the_pin(lang):
    result = load_recorded("multigpu-cpu-gloo-ddp")
    at = _live(result, lang)
    assert not at.exception
    box = [e for e in at.expander if e.label == _say("multigpu.timeline.title", lang)]
    assert len(box) == 1 and box[0].get("vega_lite_chart")
    assert any(_say("multigpu.timeline.what", lang) == c.value for c in box[0].caption)
    at.button(key=f"{NS}.live.pin").click().run()
    assert not at.exception
    assert at.session_state["side_by_side.pinned"]["result"]["started_at"] == result["started_at"]


def test_the_timeline_is_each_ranks_phases_end_to_end_by_their_durations():
    result = load_recorded("multigpu-cpu-gloo-ddp")
    df = rank_phases.frame(result)
    assert df["rank"].nunique() == len(result["ranks"]) == 2
    for rank in result["ranks"]:
        rows = df[df["rank"] == df["rank"].unique()[rank["rank"]]].sort_values("order")
        assert len(rows) == len(rank["phases"])
        assert rows["end_ms"].iloc[-1] == pytest.approx(sum(p["ms"] for p in rank["phases"]))
        assert (rows["start_ms"].iloc[1:].to_numpy() == rows["end_ms"].iloc[:-1].to_numpy()).all()
        peak = max(p["peak_bytes"] for p in rank["phases"]) - rank["baseline_bytes"]
        assert rows["peak_mib"].max() * 2**20 == pytest.approx(peak)
    assert rank_phases.frame({"ranks": [{"rank": 0, "phases": [{"phase": "model"}]}]}).empty  # no durations


def test_the_live_run_is_checked_as_the_lesson_strategy_it_is():
    ddp = load_recorded("multigpu-cpu-gloo-ddp")
    assert data_parallel_live.strategy_id(META, ddp) == "ddp"
    assert data_parallel_live.strategy_id(META, load_recorded("multigpu-cpu-gloo-ddp_big")) == "ddp_big"
    assert data_parallel_live.strategy_id(META, dict(ddp, strategy="tensor_parallel")) is None
    assert set(data_parallel_live.runs(META, ddp)) == {"run", "ddp"}
