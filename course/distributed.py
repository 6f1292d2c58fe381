"""The multi-GPU lesson's runs as data: which configurations back its prose, under which recorded ids. Torch-free.

Read by the page, the recording script (benchmarks/record_distributed.py) and the tests, so the three agree.
"""

from __future__ import annotations

import json
from pathlib import Path

LESSON = "multigpu"
META = Path(__file__).resolve().parent.parent / "lessons" / LESSON / "meta.json"
RECORDED_TIMING_STEPS = 10


def meta() -> dict:
    return json.loads(META.read_text(encoding="utf-8"))


def recording(device: str, m: dict | None = None) -> str:
    """The folder of recorded/ that holds this device's recordings (cpu-gloo, h200x2)."""
    return (m or meta())["recordings"][device]


def recorded_id(device: str, strategy_id: str, m: dict | None = None) -> str:
    return f"{LESSON}-{recording(device, m)}-{strategy_id}"


def strategy_params(m: dict, entry: dict, device: str | None = None) -> dict:
    """The distributed job's parameters of one lesson strategy (the preset, the strategy's differences)."""
    params = {**m["preset"], **(entry.get("config") or {}), **m["distributed"], "strategy": entry["strategy"]}
    if device:
        params["device"] = device
    return params


def lesson_jobs(device: str, m: dict | None = None) -> list[dict]:
    """Every run the lesson relies on, as recorded on `device` ("cuda": 2 GPUs, "cpu": gloo)."""
    m = m or meta()
    jobs = []
    for entry in m["strategies"]:
        if entry.get("devices") and device not in entry["devices"]:
            continue
        params = strategy_params(m, entry, device)
        params["timing_steps"] = RECORDED_TIMING_STEPS
        jobs.append({"id": recorded_id(device, entry["id"], m), "lesson": LESSON, "kind": "distributed",
                     "label": entry["title"], "params": params, "recording": recording(device, m),
                     "strategy_id": entry["id"]})
    return jobs


def runs_by_strategy(device: str, load) -> dict:
    """Strategy id -> recorded result (those that exist), the run keys the lesson's prompts name."""
    m = meta()
    out = {}
    for entry in m["strategies"]:
        result = load(recorded_id(device, entry["id"], m))
        if result is not None:
            out[entry["id"]] = result
    return out
