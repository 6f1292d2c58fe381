"""What a projector's half-width column shows (tests/e2e/test_browser.py checks it drawn): pickers and charts name
techniques, strategies and leak scenarios by their short names with the full title beside them, and the paired-ratio
chart's log axis has few, explicit ticks."""

from __future__ import annotations

import math
import random

import pandas as pd
import pytest

from app.charts import driver, ratios, rounds
from course import content
from tests.app.pages import open_expanders, open_page


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_technique_picker_shows_short_names_and_the_full_title_under_it(lang):
    techniques = content.meta("optimization")["techniques"]
    at = open_page("optimization", lang)
    assert not at.exception, [e.value for e in at.exception]
    picker = at.selectbox(key="optimization_technique")
    assert picker.options == [x["short"][lang] for x in techniques]
    chosen = next(x for x in techniques if x["id"] == picker.value)
    assert f"**{chosen['title'][lang]}**" in [m.value for m in at.markdown]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_compare_plan_puts_the_short_name_and_its_estimate_first_and_the_full_title_after(lang):
    strategies = content.meta("compare")["strategies"]
    at = open_page("compare", lang)
    assert not at.exception, [e.value for e in at.exception]
    shorts = [s["short"][lang] for s in strategies]
    plan = next(m.value for m in at.markdown if all(f"**{short}**" in m.value for short in shorts))
    word = "Estimated peak" if lang == "en" else "估算峰值"
    # A line per strategy, wrapped in the column (a table's later columns were cut at 1024 px): the short name and
    # its estimate, then the full title, in the lesson's order.
    at_ = 0
    for s, short in zip(strategies, shorts, strict=True):
        head = plan.index(f"**{short}** · {word} **", at_)
        at_ = plan.index(s["title"][lang], head)
    assert "|" not in plan


def test_the_leak_census_picker_names_the_scenario_and_writes_its_title_under_it():
    at = open_page("leaks", "en")
    assert not [s for s in at.selectbox if str(s.key or "").endswith(".census")], "a closed expander draws nothing"
    at = open_expanders(at, "_leak.recorded_open")
    assert not at.exception, [e.value for e in at.exception]
    pickers = [s for s in at.selectbox if str(s.key or "").endswith(".census")]
    assert pickers, "the recorded leak runs show a census"
    scenarios = {s["id"]: s for s in content.leak_scenarios("leaks")}
    for picker in pickers:
        assert set(picker.options) <= set(scenarios), picker.options
    titles = {s["title"]["en"] for s in scenarios.values()}
    chosen = pickers[0].value  # the run's label: its scenario's full title, written under the picker
    assert chosen in titles and chosen in [c.value for c in at.caption]


def test_a_text_is_shown_in_the_language_asked_and_else_in_english():
    """The expectations above read the lesson data's own {"en", "zh"} entries, not content.localized, which the pages
    use: here its rule, each side of it. English is the default where the asked language is missing or empty."""
    both = {"en": "Gradient checkpointing", "zh": "梯度检查点"}
    assert [content.localized(both, lang) for lang in ("en", "zh")] == ["Gradient checkpointing", "梯度检查点"]
    assert content.localized({"en": "Only English", "zh": ""}, "zh") == "Only English"
    assert content.localized({"zh": "只有中文"}, "en") == "只有中文"
    assert content.localized(None, "zh", "fallback") == "fallback" and content.localized("plain", "zh") == "plain"


@pytest.mark.parametrize("seed", range(5))
def test_log_ticks_are_few_powers_of_two_around_one_that_cover_the_data(seed):
    rng = random.Random(seed)
    for _ in range(200):
        lo = math.exp(rng.uniform(-6, 6))
        hi = lo * math.exp(rng.uniform(0, 8))
        ticks = ratios.log2_ticks(lo, hi)
        assert ticks[0] <= lo and ticks[-1] >= hi, (lo, hi, ticks)
        assert 1.0 in ticks and 2 <= len(ticks) <= ratios.MAX_TICKS, (lo, hi, ticks)
        steps = {round(math.log2(b / a), 9) for a, b in zip(ticks, ticks[1:], strict=False)}
        assert len(steps) == 1 and next(iter(steps)).is_integer(), ticks


def test_log_ticks_refuse_ratios_a_log_axis_cannot_draw():
    for lo, hi in ((0.0, 2.0), (-1.0, 2.0), (1.0, math.inf), (2.0, 1.0), (math.nan, 1.0)):
        with pytest.raises(ValueError, match="positive and finite"):
            ratios.log2_ticks(lo, hi)


def _layers(chart) -> list[dict]:
    return chart.to_dict()["layer"]


def test_the_paired_ratio_chart_draws_explicit_ticks_and_names_rows_above_them():
    df = pd.DataFrame(
        {
            "label": ["Accumulation ×4"] * 3 + ["Adam fused"] * 3,
            "round": [1, 2, 3] * 2,
            "ratio": [3.4, 3.7, 3.6, 0.87, 0.9, 0.98],
            "median": [3.6] * 3 + [0.9] * 3,
        }
    )
    layers = _layers(ratios.chart(df, "Baseline"))
    x = layers[1]["encoding"]["x"]
    assert x["axis"]["values"] == [0.5, 1.0, 2.0, 4.0]
    assert x["scale"]["domain"] == [0.5, 4.0]
    assert layers[1]["encoding"]["y"]["axis"]["labels"] is False
    names = [layer for layer in layers if layer.get("mark", {}).get("type") == "text"]
    assert len(names) == 1 and names[0]["encoding"]["text"]["field"] == "label"
    # A ratio a log axis cannot draw (a zero time) leaves the ticks to the rest, and nothing raises.
    zero = pd.concat([df, pd.DataFrame([{"label": "x", "round": 1, "ratio": 0.0, "median": 0.0}])])
    assert _layers(ratios.chart(zero, "Baseline"))[1]["encoding"]["x"]["axis"]["values"] == [0.5, 1.0, 2.0, 4.0]


def test_the_rounds_chart_names_rows_above_them():
    df = pd.DataFrame({"label": ["Baseline", "bf16 AMP"], "round": [1, 1], "ms": [2.9, 4.0], "median": [2.9, 4.0]})
    layers = _layers(rounds.chart(df))
    assert layers[0]["encoding"]["y"]["axis"]["labels"] is False
    assert any(layer.get("mark", {}).get("type") == "text" for layer in layers)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_recorded_runs_picker_names_a_technique_by_its_short_name(lang):
    at = open_page("optimization", lang, state={"recorded.optimization.open": True})
    assert not at.exception, [e.value for e in at.exception]
    options = at.selectbox(key="recorded.optimization").options
    for tech in content.meta("optimization")["techniques"]:
        title, short = (tech[k][lang] for k in ("title", "short"))
        if not short.startswith(title):  # a title short enough is its own short name
            assert not any(o.startswith(title) for o in options), title
        assert f"{short} (technique)" in options and f"{short} (baseline)" in options, short


def test_the_driver_chart_writes_its_views_above_the_bars():
    df = pd.DataFrame({"view": ["Driver: total − free (mem_get_info)", "PyTorch reserved"], "mib": [1000.0, 500.0]})
    layers = _layers(driver.chart(df))
    assert layers[0]["encoding"]["y"]["axis"]["labels"] is False
    assert layers[1]["mark"]["type"] == "text" and layers[1]["encoding"]["text"]["field"] == "view"
