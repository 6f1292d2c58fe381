"""The allocation timeline, the segment view and the tensor census on their pages (AppTest, jobs run inline)."""

from __future__ import annotations

import json

import pytest

from app.charts.common import CATEGORY_COLORS
from tests.app.pages import open_expanders, open_page, run_until, small_config


def _done(ns):
    return lambda at: f"{ns}.done" in at.session_state


def _specs(at):
    return [json.loads(c.proto.spec) for c in at.get("vega_lite_chart")]


def _timeline_specs(at):
    return [
        s for s in _specs(at) if "Allocation event" in json.dumps(s) or "分配事件" in json.dumps(s, ensure_ascii=False)
    ]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_analysis_run_shows_the_timeline_with_fixed_colours(lang):
    at = open_page("analysis", lang=lang, state=small_config("analysis"))
    at.button(key="analysis.run").click().run()
    run_until(at, _done("analysis"))
    assert not at.exception, [e.value for e in at.exception]
    specs = _timeline_specs(at)
    assert specs, "the lesson box and the result's expander chart the timeline"
    colors = json.dumps(specs[0])
    # The same category colours as every other chart of the app, in both languages.
    for name in ("parameters", "gradients", "optimizer_state", "data"):
        assert CATEGORY_COLORS[name] in colors
    assert '"rule"' in colors, "phase boundaries are drawn as rules"
    # On a CPU: no caching allocator, no snapshot; the page says why.
    infos = " ".join(i.value for i in at.info)
    assert ("A CPU has no caching allocator" if lang == "en" else "CPU 没有缓存分配器") in infos
    # The recording's segments are drawn under the recorded run, not a second time under the live one.
    assert ("The recorded GPU run below shows them" if lang == "en" else "下面录制的 GPU 运行结果中可以看到段") in infos
    charts = [c.proto.spec for c in at.get("vega_lite_chart")]
    assert not [c for c in charts if charts.count(c) > 1], "a chart drawn twice on the page"
    # The only snapshot offered is the one recorded on the H200 (shipped with the lessons), not one of this run.
    snapshots = [b for b in at.get("download_button") if "snapshot" in str(b.proto.label).lower()]
    assert all("recorded." in b.key for b in snapshots), [b.key for b in snapshots]  # the page's or the browser's


def test_leak_run_shows_the_census_of_the_growing_group():
    state = {
        "leaks_leak_scenarios": ["cache_outputs", "fixed"],
        "leaks_leak_steps": 3,
        "leaks_leak_batch": 8,
        "leaks_leak_width": 64,
        "leaks_leak_device": "cpu",
    }
    at = open_page("leaks", state=state)
    at.button(key="leaks_leak.run").click().run()
    run_until(at, _done("leaks_leak"))
    assert not at.exception
    frames = [d.value for d in at.dataframe]
    census = [df for df in frames if "Held by" in df.columns]
    assert census, "the census table"
    top = census[0].iloc[0]
    assert top["Tensor"] == "(8, 64) float32" and top["Δ bytes/step"] == "+2.00 KiB"  # 8 x 64 x 4 bytes
    assert "module attribute model.cache" in top["Held by"]
    # what a leak hunt reads first comes first: a half-width column at 1024 px shows these three without scrolling
    assert list(census[0].columns[:3]) == ["Tensor", "Δ bytes/step", "Held by"]
    assert any("Every tensor here is on cpu." in c.value for c in at.caption)


def test_a_small_run_has_a_timeline_expander_on_every_result_page():
    at = open_page("monitoring", state=small_config("monitoring"))
    at.button(key="monitoring.run").click().run()
    run_until(at, _done("monitoring"))
    assert not at.exception
    assert any("Memory timeline" in e.label for e in at.expander)
    assert not _timeline_specs(at), "a closed timeline expander computes nothing"
    assert _timeline_specs(open_expanders(at, ".timeline_open"))


def test_the_recorded_fragmentation_runs_build_their_segments_only_when_opened():
    """On a CPU lesson 2 shows the fragmentation patterns recorded on a GPU; their segment table and charts sit in a
    closed expander, built only when it opens (not on every page run)."""
    at = open_page("analysis", "en")

    def tables():
        return [d.value for d in at.dataframe if "Segment" in d.value.columns and "Live blocks" in d.value.columns]

    assert not at.exception and not tables()
    open_expanders(at, ".segments_open")
    assert tables() and not at.exception
