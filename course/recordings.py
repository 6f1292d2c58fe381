"""The runs that back what the lessons say, as jobs to record (benchmarks/record_results.py and
record_distributed.py) and the recorded ids each prompt is shown with (docs/expectations.md). Torch-free."""

from __future__ import annotations

from course import catalog
from course.content import (
    leak_scenarios,
    localized,
    meta,
    over_preset,
    rounds_params,
    rounds_set_params,
    rounds_sets,
    technique_configs,
)


def record_jobs(lesson_id: str) -> list[dict]:
    """Every run that backs what this lesson says: {"id" (the recorded id), "lesson", "kind", "label", "params" (without
    the device), "device" (where it is recorded), "folder" (its recorded/<folder>)} (docs/expectations.md)."""
    m = meta(lesson_id)
    jobs = _data_parallel_jobs(lesson_id, m) if catalog.page(lesson_id).data_parallel else _lesson_jobs(lesson_id, m)
    for job in jobs:
        job["lesson"] = lesson_id
    return jobs


def _lesson_jobs(lesson_id: str, m: dict) -> list[dict]:
    title = m.get("title") or {"en": lesson_id, "zh": lesson_id}

    def label(en: str, zh: str) -> dict:
        return {"en": f"{localized(title, 'en')}: {en}", "zh": f"{localized(title, 'zh')}：{zh}"}

    jobs = []
    if "preset" in m:
        jobs.append(
            {
                "id": catalog.preset_id(lesson_id),
                "kind": "run",
                "params": over_preset(m, None),
                "label": label("preset", "预设"),
            }
        )
        if m.get("profile"):
            jobs.append(
                {
                    "id": catalog.profile_id(lesson_id),
                    "kind": "profile",
                    "params": over_preset(m, None),
                    "label": label("profiler table of one step", "单步 profiler 表"),
                }
            )
    for kind, prompt in (m.get("prompts") or {}).items():
        if isinstance(prompt, dict) and prompt.get("try_change"):
            jobs.append(
                {
                    "id": catalog.try_id(lesson_id, kind),
                    "kind": "run",
                    "params": over_preset(m, prompt["try_change"]),
                    "label": label(_describe(prompt["try_change"]), _describe(prompt["try_change"])),
                }
            )
    for extra in m.get("extra_runs") or []:
        lab = extra.get("label") or {}
        jobs.append(
            {
                "id": catalog.run_id(lesson_id, extra["id"]),
                "kind": "run",
                "params": over_preset(m, extra.get("config")),
                "label": label(localized(lab, "en", extra["id"]), localized(lab, "zh", extra["id"])),
            }
        )
    for tech in m.get("techniques") or []:
        config, baseline = technique_configs(m, tech)
        for which, params in (("config", config), ("baseline", baseline)):
            jobs.append(
                {
                    "id": catalog.technique_id(lesson_id, tech["id"], which),
                    "kind": "run",
                    "params": params,
                    "label": {
                        lang: f"{localized(tech.get('title'), lang, tech['id'])} "
                        f"({'technique' if which == 'config' else 'baseline'})"
                        for lang in ("en", "zh")
                    },
                }
            )
    strategies = []
    for s in m.get("strategies") or []:
        strategies.append((s["id"], over_preset(m, s.get("config"))))
        jobs.append(
            {
                "id": catalog.run_id(lesson_id, s["id"]),
                "kind": "run",
                "params": strategies[-1][1],
                "label": s.get("title") or {"en": s["id"], "zh": s["id"]},
            }
        )
    if strategies and m.get("rounds"):
        jobs.append(
            {
                "id": catalog.rounds_id(lesson_id),
                "kind": "timing_rounds",
                "params": rounds_params(m, strategies),
                "label": label("step time in interleaved rounds", "交替多轮计时"),
            }
        )
    for rset in rounds_sets(m):
        lab = rset.get("title") or {}
        jobs.append(
            {
                "id": catalog.rounds_set_id(lesson_id, rset["id"]),
                "kind": "timing_rounds",
                "params": rounds_set_params(m, rset),
                "label": label(localized(lab, "en", rset["id"]), localized(lab, "zh", rset["id"])),
            }
        )
    for s in m.get("leak_scenarios") or []:
        if isinstance(s, dict) and s.get("id"):  # defined here, not a reference
            jobs.append(
                {
                    "id": catalog.leak_id(s["id"]),
                    "kind": "leak",
                    "params": {"scenario": s["id"], "steps": catalog.RECORDED_LEAK_STEPS},
                    "label": s.get("title") or s["id"],
                }
            )
    for f in m.get("fragmentation") or []:
        jobs.append(
            {
                "id": catalog.fragmentation_id(lesson_id, f["id"]),
                "kind": "fragmentation",
                "params": dict(f["params"]),
                "label": f.get("label") or f["id"],
            }
        )
    return [dict(job, device="cuda", folder=catalog.RECORDED_FOLDER) for job in jobs]


def _data_parallel_jobs(lesson_id: str, m: dict) -> list[dict]:
    """A data-parallel lesson's strategies, recorded on each device it names ("recordings": device -> folder),
    the strategies marked "devices" only there; params are the preset, the strategy's differences and the lesson's
    "distributed" settings."""
    jobs = []
    for device, folder in (m.get("recordings") or {}).items():
        for entry in m.get("strategies") or []:
            if entry.get("devices") and device not in entry["devices"]:
                continue
            params = {**m["preset"], **(entry.get("config") or {}), **m["distributed"], "strategy": entry["strategy"]}
            jobs.append(
                {
                    "id": catalog.data_parallel_id(lesson_id, folder, entry["id"]),
                    "kind": "distributed",
                    "label": entry["title"],
                    "params": params,
                    "device": device,
                    "folder": folder,
                    "strategy_id": entry["id"],
                }
            )
    return jobs


def _describe(change: dict) -> str:
    return ", ".join(f"{k} = {v}" for k, v in change.items())


def all_jobs() -> list[dict]:
    """Every single-device lesson's jobs (recorded on one GPU), each id once (a scenario two lessons show is
    recorded once)."""
    jobs = {}
    for lesson in catalog.LESSON_IDS:
        for job in record_jobs(lesson):
            jobs.setdefault(job["id"], job)
    return list(jobs.values())


def data_parallel_jobs(device: str) -> list[dict]:
    """Every data-parallel lesson's jobs recorded on `device` ("cuda": several GPUs, "cpu": gloo processes)."""
    return [job for p in catalog.PAGES if p.data_parallel for job in record_jobs(p.id) if job["device"] == device]


def device_params(job: dict, device: str | None = None) -> dict:
    """A job's parameters as run on `device` (default: where it is recorded), timed over the recordings' steps."""
    from experiments.core.config import ExperimentConfig

    device = device or job["device"]
    params = dict(job["params"])
    timing = catalog.RECORDED_TIMING_STEPS.get(job["kind"])
    if job["kind"] in ("run", "profile"):
        params = ExperimentConfig.from_dict(
            dict(params, device=device, timing_steps=params.get("timing_steps", timing))
        ).to_dict()
    elif job["kind"] == "timing_rounds":
        params["strategies"] = [dict(s, config=dict(s["config"], device=device)) for s in params["strategies"]]
    elif job["kind"] == "distributed":
        params.update(device=device, timing_steps=timing)
    else:
        params["device"] = device
    return params


def prompt_recorded_ids(lesson_id: str, kind: str, device: str = "cuda") -> dict[str, str]:
    """Run key -> recorded id of the results a prompt of this kind is shown with (docs/expectations.md); a
    data-parallel lesson's prompts read each strategy's run as recorded on `device`."""
    m = meta(lesson_id)
    prompt = (m.get("prompts") or {}).get(kind) or {}
    if catalog.page(lesson_id).data_parallel:
        return {j["strategy_id"]: j["id"] for j in record_jobs(lesson_id) if j["device"] == device}
    if kind == "leak":
        return {s["id"]: catalog.leak_id(s["id"]) for s in leak_scenarios(lesson_id)}
    if kind == "rounds":
        return {"rounds": catalog.rounds_id(lesson_id)}
    if m.get("strategies") and kind in ("memory", "time"):
        return {s["id"]: catalog.run_id(lesson_id, s["id"]) for s in m["strategies"]}
    ids = {"run": catalog.preset_id(lesson_id)}
    if prompt.get("try_change"):
        ids["changed"] = catalog.try_id(lesson_id, kind)
    return ids
