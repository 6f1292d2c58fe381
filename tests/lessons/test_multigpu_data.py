"""Lesson 6's prose and data cannot drift apart: its prompts' checks and quoted numbers against the recorded
data-parallel runs. The CPU (gloo, 2 processes) recordings ship now; the 2-GPU ones (recorded/h200x2) are made
on a machine with two NVIDIA H200s by benchmarks/record_distributed.py, and their tests skip until they exist."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from experiments import expectations, facts
from experiments.distributed import DistributedConfig
from experiments.distributed_lesson import LESSON, lesson_jobs, meta, recording, runs_by_strategy
from experiments.recorded import ROOT as RECORDED_ROOT
from experiments.recorded import load_recorded

sys.path.insert(0, str(Path(__file__).parent))
import awaiting  # noqa: E402
from test_lesson_data import bare_numbers, prose_of  # noqa: E402

LESSON_DIR = Path(__file__).resolve().parents[2] / "lessons" / LESSON
M = meta()
PROMPTS = sorted(M["prompts"])
DEVICES = ("cpu", "cuda")


def _recorded(device: str) -> bool:
    return (RECORDED_ROOT / recording(device, M)).is_dir()


def _need(device: str) -> None:
    if not _recorded(device):
        pytest.skip(f"recorded/{recording(device, M)} does not exist yet: run "
                    f"`python3 benchmarks/record_distributed.py --device {device}` on a machine with 2 GPUs")


def test_lesson_data_is_valid():
    assert M["title"]["en"] and M["title"]["zh"]
    for device in DEVICES:
        for job in lesson_jobs(device, M):
            DistributedConfig.from_dict(job["params"])
    for kind, prompt in M["prompts"].items():
        assert prompt.get("expect") and prompt.get("try_expect"), kind
        for check in prompt["expect"] + prompt["try_expect"]:
            expectations.validate(check)
            assert check.get("run") in {s["id"] for s in M["strategies"]}, (kind, check)
    names = set(M["facts"])
    texts = prose_of(M) + [p.read_text(encoding="utf-8") for p in LESSON_DIR.glob("*.md")]
    for text in texts:
        assert not facts.placeholders(text) - names, facts.placeholders(text) - names
    assert {p.name for p in LESSON_DIR.glob("*.md")} == {"lesson.en.md", "lesson.zh.md"}


@pytest.mark.parametrize("path", sorted(LESSON_DIR.glob("*.md")), ids=lambda p: p.name)
def test_prose_quotes_no_unrecorded_numbers(path):
    assert bare_numbers(path.read_text(encoding="utf-8")) == []


def test_prompts_quote_no_unrecorded_numbers():
    assert [n for text in prose_of(M) for n in bare_numbers(text)] == []


@pytest.mark.parametrize("device", DEVICES)
def test_recordings_are_of_what_the_lesson_says_now(device):
    _need(device)
    folder = RECORDED_ROOT / recording(device, M)
    jobs = lesson_jobs(device, M)
    for job in jobs:
        path = folder / f"{job['id']}.json"
        assert path.exists(), f"{job['id']} is not recorded: run benchmarks/record_distributed.py --device {device}"
        entry = json.loads(path.read_text(encoding="utf-8"))
        assert entry["kind"] == "distributed" and entry["params"] == job["params"], job["id"]
        result = entry["result"]
        assert not result["errors"] and len(result["ranks"]) == job["params"]["world_size"], job["id"]
        assert result["update_check"]["ok"], (job["id"], result["update_check"])
    stale = sorted(p.stem for p in folder.glob("*.json") if p.stem not in {j["id"] for j in jobs})
    assert not stale, f"recordings the lesson no longer uses: {stale}"


def _offload_awaits() -> bool:
    return awaiting.awaits_offload_recording(load_recorded(awaiting.OFFLOAD_RECORDING))


def test_the_offload_recording_still_awaits_its_re_recording():
    """The marker of tests/lessons/awaiting.py cannot outlive the recording it waits for."""
    assert load_recorded(awaiting.OFFLOAD_RECORDING) is not None, f"{awaiting.OFFLOAD_RECORDING} is not recorded"
    assert _offload_awaits(), (f"{awaiting.OFFLOAD_RECORDING} now counts host memory apart: delete "
                               "tests/lessons/awaiting.py and its uses, so that its checks and facts are tested again")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", PROMPTS)
def test_prompt_holds_on_the_recording(device, kind):
    _need(device)
    runs = runs_by_strategy(device, load_recorded)
    prompt = M["prompts"][kind]
    for field in ("expect", "try_expect"):
        outcomes = expectations.evaluate(prompt[field], runs)
        if _offload_awaits():
            waiting = [o for o in outcomes if awaiting.awaiting_check(o["spec"], device)]
            assert not [o for o in waiting if o["holds"]], f"{kind}.{field}: marked awaiting, yet it holds: {waiting}"
            outcomes = [o for o in outcomes if o not in waiting]
        failed = [o for o in outcomes if o["holds"] is False]
        assert not failed, f"{kind}.{field} does not hold on recorded/{recording(device, M)}: {failed}"
        missing = expectations.unapplied(outcomes)
        assert not missing, f"{kind}.{field}: checks not evaluated on recorded/{recording(device, M)}: {missing}"
        if device == "cuda":
            assert expectations.verdict(outcomes) is not None, f"{kind}.{field}: no check applied on the GPU"


def test_facts_are_recorded_and_in_range():
    for name, spec in M["facts"].items():
        number = facts.value(spec, load_recorded)
        if name in awaiting.OFFLOAD_FACTS and _offload_awaits():
            assert number is None, f"{name}: marked awaiting the offload recording, yet it has a value"
            continue
        assert number is not None, f"{name}: no recorded value ({spec.get('run')})"
        assert facts.holds(spec, number), f"{name} = {number:.4g} is outside {spec.get('min')}..{spec.get('max')}"


def test_the_estimate_is_close_on_every_cpu_recording():
    for sid, result in runs_by_strategy("cpu", load_recorded).items():
        measured = max(r["peak_bytes"] for r in result["ranks"])
        assert abs(result["estimate"]["peak_bytes"] - measured) / measured < 0.15, sid
