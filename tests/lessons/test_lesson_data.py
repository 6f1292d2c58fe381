"""Prose and data cannot drift apart: every prompt's expectation, every quoted number and every recorded
run the lessons rely on is checked here, against the NVIDIA H200 recordings and against real CPU runs."""

from __future__ import annotations

import json
from functools import cache

import pytest

from course import catalog, claims, content, expectations, facts, recordings
from experiments.core.config import ExperimentConfig
from experiments.core.recorded import ADDED_LATER, load_recorded
from experiments.core.recorded import ROOT as RECORDED_ROOT
from experiments.jobs.kinds import execute
from tests.lessons import awaiting
from tests.lessons.prose import prose_of, texts

LESSONS = catalog.LESSON_IDS
JOBS = recordings.all_jobs()
PROMPTS = [(lesson, kind) for lesson in LESSONS for kind in sorted(content.meta(lesson).get("prompts") or {})]
MARKDOWN = sorted(content.lessons_dir().glob("*/*.md"))
# Rounds sets (meta "rounds_sets") the lead records on the H200; until a file exists, what needs it skips.
ROUNDS_SET_IDS = {
    catalog.rounds_set_id(lesson, r["id"]) for lesson in LESSONS for r in content.rounds_sets(content.meta(lesson))
}
RECORDED = RECORDED_ROOT / catalog.RECORDED_FOLDER


def _record_command(ids) -> str:
    prefixes = " ".join(sorted(ids))
    return (
        f"not recorded yet: run `python benchmarks/record_results.py --out recorded/{catalog.RECORDED_FOLDER} "
        f"--only {prefixes}` on the H200"
    )


def _cpu_only_if_applicable(checks: list[dict]) -> bool:
    return any(not c.get("devices") or "cpu" in c["devices"] for c in checks)


@cache
def _cpu(kind: str, params_json: str) -> dict:
    params = json.loads(params_json)
    job = {"kind": kind, "params": params}
    return execute(
        kind,
        recordings.device_params(job, "cpu")
        if kind != "run"
        else ExperimentConfig.from_dict(dict(params, device="cpu")).to_dict(),
    )


def cpu_run(kind: str, params: dict) -> dict:
    return _cpu(kind, json.dumps(params, sort_keys=True))


# --- the lesson data is well formed ---


@pytest.mark.parametrize("lesson", LESSONS)
def test_lesson_data_is_valid(lesson):
    meta = content.meta(lesson)
    assert meta.get("title"), f"{lesson}: meta.json missing or without a title"
    for job in recordings.record_jobs(lesson):
        if job["kind"] in ("run", "profile"):
            ExperimentConfig.from_dict(job["params"])
        elif job["kind"] == "timing_rounds":
            for s in job["params"]["strategies"]:
                ExperimentConfig.from_dict(s["config"])
    for kind, prompt in (meta.get("prompts") or {}).items():
        for check in (prompt.get("expect") or []) + (prompt.get("try_expect") or []):
            expectations.validate(check)
        assert prompt.get("expect"), f"{lesson}.{kind}: the notice states nothing checkable"
        assert prompt.get("try_expect"), f"{lesson}.{kind}: the try prompt predicts nothing checkable"
    for s in content.leak_scenarios(lesson):
        assert s.get("expect_check"), f"leak scenario {s['id']} has no expect_check"
    for f in meta.get("fragmentation") or []:
        assert f.get("expect"), f"fragmentation {f['id']} has no expect"
    for tech in meta.get("techniques") or []:
        # Each explanation says why its data came out as it did: it states something checkable about the pair and,
        # for a time claim, about the interleaved rounds of that pair (course/claims.py: runs), where every time
        # statement is judged; one pair of runs judges none.
        keys = ("run", "baseline", claims.ROUNDS) if tech.get("rounds") else ("run", "baseline")
        for key in ("why_holds", "why_not"):
            assert tech.get(f"{key}_expect"), f"{lesson}.{tech['id']}.{key} states nothing checkable"
            for check in tech[f"{key}_expect"]:
                expectations.validate(check)
                where = f"{lesson}.{tech['id']}.{key}: {check}"
                assert check.get("run", "run") in keys, where
                assert check.get("metric") not in ("step_time_ratio", "step_ms"), f"a time read off one pair: {where}"
                if check.get("run") == claims.ROUNDS:
                    named = {check[k] for k in ("strategy", "versus") if k in check}
                    assert named and named <= {claims.TECHNIQUE, claims.BASELINE}, where
    for check in meta.get("profile_expect") or []:
        expectations.validate(check)
    if meta.get("profile"):
        assert meta.get("profile_expect"), f"{lesson}: the lesson reads the profiler table but checks nothing on it"
    names = facts.names(meta.get("facts") or {})
    for text in prose_of(meta) + [p.read_text(encoding="utf-8") for p in (content.lessons_dir() / lesson).glob("*.md")]:
        missing = {n for n in facts.placeholders(text) - names if not n.startswith(("preset.", "try."))}
        assert not missing, f"{lesson}: placeholders without a fact: {sorted(missing)}"
    for kind, prompt in (meta.get("prompts") or {}).items():
        words = content.config_words(meta, kind, content.cpu_scale(meta))
        for text in texts(prompt.get("notice")) + texts(prompt.get("try")):
            missing = facts.placeholders(text) - names - set(words)
            assert not missing, f"{lesson}.{kind}: placeholders without a value: {sorted(missing)}"


def test_technique_and_strategy_configs_state_only_differences():
    for lesson in LESSONS:
        meta = content.meta(lesson)
        preset = meta.get("preset") or {}
        items = [
            *(meta.get("techniques") or []),
            *(meta.get("strategies") or []),
            *(s for r in content.rounds_sets(meta) for s in r["strategies"]),
        ]
        for item in items:
            for which in ("config", "baseline"):
                same = {k for k, v in (item.get(which) or {}).items() if preset.get(k) == v}
                assert not same, f"{lesson}.{item['id']}.{which} restates the preset: {sorted(same)}"


# --- the recordings are of exactly what the lessons say now ---


def _with_added(params):
    """Settings as compared: a configuration recorded before a field existed has it at the value every run then
    had (experiments/core/recorded.py ADDED_LATER), nested configurations (rounds, strategies) too."""
    if isinstance(params, dict):
        filled = {k: _with_added(v) for k, v in params.items()}
        return {**ADDED_LATER, **filled} if "model" in params else filled
    if isinstance(params, list):
        return [_with_added(v) for v in params]
    return params


@pytest.mark.parametrize("job", JOBS, ids=[j["id"] for j in JOBS])
def test_recorded_result_matches_lesson_data(job):
    path = RECORDED / f"{job['id']}.json"
    if job["id"] in ROUNDS_SET_IDS and not path.exists():
        pytest.skip(f"{job['id']} {_record_command([job['id']])}")
    assert path.exists(), f"{job['id']} is not recorded: run benchmarks/record_results.py on the GPU"
    entry = json.loads(path.read_text(encoding="utf-8"))
    assert entry["kind"] == job["kind"]
    recorded, wanted = _with_added(entry["params"]), _with_added(recordings.device_params(job, "cuda"))
    assert recorded == wanted, f"{job['id']} was recorded from other settings"


def test_no_stale_recordings():
    ids = {j["id"] for j in JOBS}
    stale = sorted(p.stem for p in RECORDED.glob("*.json") if p.stem not in ids)
    assert not stale, f"recorded results no lesson uses: {stale}"


# --- every prompt holds on the data it is shown with ---


def _recorded_runs(lesson: str, kind: str) -> dict:
    return {
        key: load_recorded(rid)
        for key, rid in recordings.prompt_recorded_ids(lesson, kind).items()
        if load_recorded(rid) is not None
    }


@pytest.mark.parametrize(("lesson", "kind"), PROMPTS)
def test_prompt_holds_on_the_h200_recording(lesson, kind):
    prompt = content.meta(lesson)["prompts"][kind]
    runs = _recorded_runs(lesson, kind)
    for field in ("expect", "try_expect"):
        outcomes = expectations.evaluate(prompt.get(field) or [], runs)
        failed = [o for o in outcomes if o["holds"] is False]
        assert not failed, f"{lesson}.{kind}.{field} does not hold on the H200 recording: {failed}"
        # A check with no run or no figure to read backs nothing, even when a sibling check holds.
        missing = expectations.unapplied(outcomes)
        assert not missing, f"{lesson}.{kind}.{field}: checks not evaluated on the H200 recording: {missing}"
        assert expectations.verdict(outcomes) is True, f"{lesson}.{kind}.{field}: no check applied"


def _cpu_runs(lesson: str, kind: str) -> dict:
    """The runs a learner without a GPU sees with this prompt: the lesson's CPU-sized configurations."""
    meta = content.meta(lesson)
    k = content.cpu_scale(meta)
    prompt = meta["prompts"][kind]
    if kind == "leak":
        return {
            s["id"]: cpu_run("leak", {"scenario": s["id"], "steps": catalog.RECORDED_LEAK_STEPS})
            for s in content.leak_scenarios(lesson)
        }
    if kind == "rounds":
        strategies = [(s["id"], content.over_preset(meta, s.get("config"), k)) for s in meta["strategies"]]
        return {"rounds": cpu_run("timing_rounds", content.rounds_params(meta, strategies))}
    if meta.get("strategies") and kind in ("memory", "time"):
        return {s["id"]: cpu_run("run", content.over_preset(meta, s.get("config"), k)) for s in meta["strategies"]}
    runs = {"run": cpu_run("run", content.over_preset(meta, None, k))}
    if prompt.get("try_change"):
        runs["changed"] = cpu_run("run", content.over_preset(meta, prompt["try_change"], k))
    return runs


@pytest.mark.parametrize(("lesson", "kind"), PROMPTS)
def test_prompt_holds_on_a_cpu_run(lesson, kind):
    prompt = content.meta(lesson)["prompts"][kind]
    checks = (prompt.get("expect") or []) + (prompt.get("try_expect") or [])
    if not _cpu_only_if_applicable(checks):
        pytest.skip("every check of this prompt is GPU-only (and its text says so)")
    runs = _cpu_runs(lesson, kind)
    for field in ("expect", "try_expect"):
        outcomes = expectations.evaluate(prompt.get(field) or [], runs)
        failed = [o for o in outcomes if o["holds"] is False]
        assert not failed, f"{lesson}.{kind}.{field} does not hold on CPU: {failed}"
        missing = expectations.unapplied(outcomes)
        assert not missing, f"{lesson}.{kind}.{field}: checks not evaluated on the CPU run: {missing}"
    for key, run in runs.items():
        for where, result in _drawn_beside_a_peak(run):
            off = [o for o in _sum_outcomes(result) if o["holds"] is not True]
            assert not off, f"{lesson}.{kind} {key} {where}: categories minus peak (MiB): {[o['actual'] for o in off]}"


@pytest.mark.parametrize("scenario", [s["id"] for s in content.leak_scenarios(catalog.LEAK_LESSON)])
def test_leak_scenario_expectation_holds_on_h200_and_cpu(scenario):
    entry = {s["id"]: s for s in content.leak_scenarios(catalog.LEAK_LESSON)}[scenario]
    recorded = load_recorded(catalog.leak_id(scenario))
    assert recorded is not None, f"{catalog.leak_id(scenario)} is not recorded: run benchmarks/record_results.py"
    cpu = cpu_run("leak", {"scenario": scenario, "steps": catalog.RECORDED_LEAK_STEPS})
    for source, result in (("H200", recorded), ("CPU", cpu)):
        outcomes = expectations.evaluate(entry["expect_check"], {"run": result})
        assert expectations.verdict(outcomes) is True, f"{scenario} on {source}: {outcomes}"


def test_fragmentation_expectations_hold_on_the_h200_recording():
    patterns = [(lesson, f) for lesson in LESSONS for f in content.meta(lesson).get("fragmentation") or []]
    assert patterns, "no lesson shows an allocator pattern: this test would check nothing"
    for lesson in LESSONS:
        for f in content.meta(lesson).get("fragmentation") or []:
            rid = catalog.fragmentation_id(lesson, f["id"])
            result = load_recorded(rid)
            assert result is not None, f"{rid} is not recorded: run benchmarks/record_results.py on the GPU"
            outcomes = expectations.evaluate(f["expect"], result["runs"])
            assert expectations.verdict(outcomes) is True, f"{f['id']}: {outcomes}"


@pytest.mark.parametrize("lesson", [x for x in LESSONS if content.meta(x).get("profile")])
def test_profiler_bullets_hold_on_the_h200_table(lesson):
    outcomes = expectations.evaluate(
        content.meta(lesson)["profile_expect"], {"run": load_recorded(catalog.profile_id(lesson))}
    )
    assert not [o for o in outcomes if o["holds"] is False], outcomes
    assert not expectations.unapplied(outcomes) and expectations.verdict(outcomes) is True


SUMS = [{"check": "breakdown_sums_to_peak"}, {"check": "breakdown_sums_to_peak", "source": "estimated"}]


def _drawn_beside_a_peak(result: dict) -> list[tuple[str, dict]]:
    """Every result whose categories a page stacks next to its peak: a run, or each rank of a data-parallel run."""
    if result.get("ranks"):
        return [(f"rank {r['rank']}", r) for r in result["ranks"]]
    return [("run", result)] if result.get("breakdown") else []


def _sum_outcomes(result: dict) -> list[dict]:
    checks = SUMS if (result.get("estimate") or {}).get("categories") else SUMS[:1]
    return expectations.evaluate(checks, {"run": result})


def _with_breakdowns() -> list:
    """Every recorded result a page draws categories for; the CPU-offload recording that counted host memory in
    its ranks' breakdowns is marked while tests/lessons/awaiting.py waits for its re-recording (strict: a
    recording that adds up fails the mark)."""
    out = []
    for folder in ("h200", "h200x2", "cpu-gloo"):
        for path in sorted((RECORDED_ROOT / folder).glob("*.json")):
            result = json.loads(path.read_text(encoding="utf-8"))["result"]
            if not _drawn_beside_a_peak(result):
                continue
            marks = (
                [pytest.mark.xfail(strict=True, reason=f"counts host memory in its breakdown: {awaiting.COMMAND}")]
                if path.stem == awaiting.OFFLOAD_RECORDING and awaiting.awaits_offload_recording(result)
                else []
            )
            out.append(pytest.param(path, id=f"{folder}/{path.stem}", marks=marks))
    return out


@pytest.mark.parametrize("path", _with_breakdowns())
def test_categories_add_up_to_the_peak_they_are_drawn_beside(path):
    result = json.loads(path.read_text(encoding="utf-8"))["result"]
    for where, run in _drawn_beside_a_peak(result):
        off = [o for o in _sum_outcomes(run) if o["holds"] is not True]
        assert not off, f"{path.stem} {where}: categories minus peak (MiB): {[o['actual'] for o in off]}"


# --- every number the prose quotes is a recorded one, in the direction the prose states ---


@pytest.mark.parametrize("lesson", LESSONS)
def test_facts_are_recorded_and_in_range(lesson):
    pending = set()
    for name, spec in (content.meta(lesson).get("facts") or {}).items():
        if spec.get("run") in ROUNDS_SET_IDS and load_recorded(spec["run"]) is None:
            pending.add(spec["run"])
            continue
        number = facts.value(spec, load_recorded)
        assert number is not None, f"{lesson}.{name}: no recorded value ({spec.get('run')}, {spec.get('baseline')})"
        summary = facts.paired_summary(spec, load_recorded)
        spread = f" (rounds {summary['lo']:.4g}..{summary['hi']:.4g})" if summary else ""
        assert facts.holds(spec, number, summary), (
            f"{lesson}.{name} = {number:.4g}{spread} is outside {spec.get('min')}..{spec.get('max')}"
        )
    if pending:
        pytest.skip(f"{lesson}: facts of {sorted(pending)} {_record_command(pending)}")
