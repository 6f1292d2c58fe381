"""The CPU-sized lesson runs keep what the lessons teach: the page says the peak's phase and every category's
share stay those of the full size and the bytes are about 1/k² of them (app/i18n.py "sizing.cpu"); checked
here with the estimator's exact tensor bytes for every configuration a lesson runs, and by a real run."""

from __future__ import annotations

import functools
import json

import pytest

from course import catalog, content
from experiments.core.config import ExperimentConfig
from experiments.estimate.estimator import estimate
from experiments.measure.run import run_experiment

SIZED = [lesson for lesson in catalog.LESSON_IDS if content.cpu_scale(content.meta(lesson)) > 1]


def _configs(meta: dict) -> list[tuple[str, dict | None]]:
    out = [("preset", None)]
    out += [(f"try.{kind}", p["try_change"]) for kind, p in (meta.get("prompts") or {}).items() if p.get("try_change")]
    out += [(s["id"], s.get("config")) for s in meta.get("strategies") or []]
    for tech in meta.get("techniques") or []:  # "Measure the claim": both runs of the pair
        out += [(tech["id"], tech.get("config")), (f"{tech['id']}.baseline", tech.get("baseline"))]
    return out


@functools.cache
def _estimate_json(config_json: str) -> dict:
    return estimate(ExperimentConfig.from_dict({**json.loads(config_json), "device": "cpu"}), device_type="cpu")


def _estimate(config: dict) -> dict:
    """The CPU estimate of a configuration, made once for all the tests here (the pairs and the presets overlap)."""
    return _estimate_json(json.dumps(config, sort_keys=True))


def _shares(est: dict) -> dict[str, float]:
    return {c: v / est["peak_bytes"] for c, v in (est.get("categories") or {}).items()}


@pytest.mark.parametrize("lesson", SIZED)
def test_sized_runs_keep_the_phase_and_shares_of_the_full_size(lesson):
    meta = content.meta(lesson)
    k = content.cpu_scale(meta)
    for name, change in _configs(meta):
        full, small = _estimate(content.over_preset(meta, change)), _estimate(content.over_preset(meta, change, k))
        assert small["peak_phase"] == full["peak_phase"], f"{lesson}.{name}: the peak moved"
        a, b = _shares(full), _shares(small)
        for category in set(a) | set(b):
            assert abs(a.get(category, 0) - b.get(category, 0)) < 0.01, f"{lesson}.{name}.{category}"
        assert small["peak_bytes"] * k * k == pytest.approx(full["peak_bytes"], rel=0.02), f"{lesson}.{name}"


@pytest.mark.parametrize("lesson", [x for x in SIZED if content.meta(x).get("techniques")])
def test_a_sized_pair_saves_what_the_full_pair_saves(lesson):
    """The optimization page measures a claim with both runs sized on a CPU: the saving is the full size's,
    so the verdict against the claimed range is too (the range's edges are at least a point away)."""
    meta = content.meta(lesson)
    k = content.cpu_scale(meta)
    memory_claims = [t for t in meta["techniques"] if t.get("metric", "peak_saving_pct") == "peak_saving_pct"]
    assert memory_claims, f"{lesson}: no memory claim to size"
    for tech in memory_claims:
        savings = []
        for scale in (1, k):
            config, baseline = content.technique_configs(meta, tech, scale)
            a, b = _estimate(config)["peak_bytes"], _estimate(baseline)["peak_bytes"]
            savings.append((b - a) / b * 100)
        assert abs(savings[0] - savings[1]) < 1, (tech["id"], savings)
        lo, hi = tech["claimed_range"]
        assert (lo <= savings[0] <= hi) == (lo <= savings[1] <= hi), (tech["id"], savings)


def test_the_lessons_a_cpu_runs_smaller_are_checked_above():
    """The tests above are parametrized by SIZED: were it empty (a lesson's cpu_scale not read), they would have no
    case and pass. The lessons whose pages say they run 4x smaller without a GPU (their meta.json cpu_scale)."""
    sized = {"monitoring", "analysis", "optimization", "leaks", "compare", "exercise1", "exercise2"}
    assert set(SIZED) == sized and {content.cpu_scale(content.meta(x)) for x in sized} == {4}


def test_a_sized_run_measures_what_its_estimate_says():
    meta = content.meta("exercise1")
    config = content.over_preset(meta, None, content.cpu_scale(meta))
    measured = run_experiment(ExperimentConfig.from_dict({**config, "device": "cpu", "timing_steps": 0}))
    assert measured["peak_bytes"] - measured["baseline_bytes"] == _estimate(config)["peak_bytes"]


def test_sized_keeps_configs_valid():
    assert content.sized({"width": 2048, "batch": 32, "accum": 8}, 8) == {"width": 256, "batch": 8, "accum": 8}
    assert content.sized({"width": 100, "batch": 3}, 4) == {"width": 25, "batch": 1}
    t = content.sized({"model": "transformer", "width": 1024, "heads": 48, "batch": 8}, 4)
    assert t["width"] % (48 * 8) == 0 and t["batch"] == 2
    assert content.sized({"width": 64, "batch": 8}, 1) == {"width": 64, "batch": 8}
    for lesson in catalog.LESSON_IDS:
        meta = content.meta(lesson)
        for _, change in _configs(meta):
            ExperimentConfig.from_dict(content.over_preset(meta, change, content.cpu_scale(meta)))


def test_prompt_texts_name_the_values_of_the_runs_they_are_shown_with():
    meta = content.meta("exercise2")
    k = content.cpu_scale(meta)
    words = content.config_words(meta, "memory", k)
    assert words["preset.batch"] == str(32 // k) and words["try.accum"] == "4"
    assert words["try.micro_batch"] == str(32 // k // 4)
    assert content.config_words(meta, "memory", 1)["try.micro_batch"] == "8"
