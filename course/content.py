"""Reads lesson texts and settings from lessons/<id>/ at runtime (no Streamlit here)."""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path

from course import catalog

ROOT = Path(__file__).resolve().parent.parent


def lessons_dir() -> Path:
    # The override lets tests and development point at other lesson files without touching lessons/.
    return Path(os.environ.get("GPU_MEMORY_LAB_LESSONS", ROOT / "lessons"))


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


@lru_cache(maxsize=256)
def _read(path: Path, mtime: float | None) -> str | None:
    # mtime is part of the cache key so edited lesson files show up without a restart.
    if mtime is None:
        return None
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def read_text(lesson_id: str, name: str, lang: str) -> tuple[str | None, str | None]:
    """(text, language it is in) of lessons/<id>/<name>.<lang>.md, else the other language's file."""
    for candidate in (lang, "en" if lang == "zh" else "zh"):
        path = lessons_dir() / lesson_id / f"{name}.{candidate}.md"
        text = _read(path, _mtime(path))
        if text is not None:
            return text, candidate
    return None, None


def meta(lesson_id: str) -> dict:
    path = lessons_dir() / lesson_id / "meta.json"
    text = _read(path, _mtime(path))
    if not text:
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return {}
    if not isinstance(data, dict):
        return {}
    data.setdefault("id", lesson_id)
    return data


def localized(value, lang: str, default: str = "") -> str:
    """A {"en": ..., "zh": ...} dict (or a plain string) in the wanted language."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        for key in (lang, "en", "zh"):
            if isinstance(value.get(key), str) and value[key]:
                return value[key]
    return default


# --- Lesson data as experiments: configurations, leak scenarios and the recorded ids that back them ---

def over_preset(meta: dict, diff: dict | None, scale: int = 1) -> dict:
    """A configuration the lesson states as "the preset, with these differences"; `scale` > 1 sizes it for a
    CPU (`sized`)."""
    return sized({**(meta.get("preset") or {}), **(diff or {})}, scale)


# Width and batch shrink together: activations grow with batch x width and the weights with width^2, so
# dividing both by k keeps every category's share of the peak (and where the peak is), while a step's
# matmul work falls by k^3 and the optimizer's by k^2.
SIZED_FIELDS = ("width", "batch")


def cpu_scale(meta: dict) -> int:
    """How many times smaller the lesson's runs are on a machine without a GPU (meta "cpu_scale", default 1)."""
    try:
        return max(1, int(meta.get("cpu_scale") or 1))
    except (TypeError, ValueError):
        return 1


def sized(config: dict, scale: int) -> dict:
    """config with width and batch divided by `scale`; the batch stays a multiple of accum, and a transformer's
    width a multiple of its heads."""
    out = dict(config)
    if scale <= 1:
        return out
    for field in SIZED_FIELDS:
        if field in out:
            out[field] = max(1, int(out[field]) // scale)
    accum = int(out.get("accum") or 1)
    if "batch" in out and out["batch"] % accum:
        out["batch"] = max(accum, out["batch"] // accum * accum)
    heads = int(out.get("heads") or 1)
    if out.get("model") == "transformer" and "width" in out and out["width"] % heads:
        out["width"] = max(heads, out["width"] // heads * heads)
    return out


def sized_change(meta: dict, diff: dict | None, scale: int) -> dict:
    """A "try this" change as it applies at this size: its own fields, read off the sized configuration."""
    full = over_preset(meta, diff, scale)
    return {k: full[k] for k in diff or {}}


def config_words(meta: dict, kind: str | None, scale: int) -> dict[str, str]:
    """{{preset.<field>}} and {{try.<field>}} for a prompt's text: the values of the runs it talks about."""
    words = {f"preset.{k}": str(v) for k, v in over_preset(meta, None, scale).items()}
    prompt = ((meta.get("prompts") or {}).get(kind) or {}) if kind else {}
    if prompt.get("try_change"):
        changed = over_preset(meta, prompt["try_change"], scale)
        words.update({f"try.{k}": str(changed[k]) for k in prompt["try_change"]})
        words["try.micro_batch"] = str(int(changed.get("batch", 1)) // int(changed.get("accum") or 1))
    return words


def technique_configs(meta: dict, technique: dict, scale: int = 1) -> tuple[dict, dict]:
    """(technique, baseline), each its overrides on the preset; `scale` > 1 sizes both for a CPU (`sized`)."""
    return over_preset(meta, technique.get("config"), scale), over_preset(meta, technique.get("baseline"), scale)


def leak_scenarios(lesson_id: str) -> list[dict]:
    """The scenarios a lesson lists; ids are resolved against the lesson that defines each scenario once
    (catalog.LEAK_LESSON)."""
    listed = meta(lesson_id).get("leak_scenarios") or []
    defined = {s["id"]: s for s in meta(catalog.LEAK_LESSON).get("leak_scenarios") or []
               if isinstance(s, dict) and s.get("id")}
    out = []
    for entry in listed:
        if isinstance(entry, str) and entry in defined:
            out.append(defined[entry])
        elif isinstance(entry, dict) and entry.get("id"):
            out.append(entry)
    return out


def rounds_params(meta: dict, strategies: list[tuple[str, dict]], device: str | None = None,
                  spec: dict | None = None) -> dict:
    """A timing_rounds job over `strategies`; rounds, steps and warm-up from `spec` (default: meta "rounds")."""
    cfg = spec if spec is not None else meta.get("rounds") or {}
    items = [{"id": sid, "config": dict(c, device=device) if device else c} for sid, c in strategies]
    return {"strategies": items, "rounds": int(cfg.get("rounds", 3)), "steps": int(cfg.get("steps", 10)),
            "warmup": int(cfg.get("warmup", 2))}


# A rounds set is a group of configurations a lesson compares in time (meta "rounds_sets"), timed together in
# interleaved rounds; its first strategy is the one the others are paired against. Every time ratio a lesson
# states is read from one (course/facts.py: paired_ratio).

def rounds_sets(meta: dict) -> list[dict]:
    return [s for s in meta.get("rounds_sets") or [] if isinstance(s, dict) and s.get("id") and s.get("strategies")]


def rounds_set(meta: dict, set_id: str) -> dict | None:
    return next((s for s in rounds_sets(meta) if s["id"] == set_id), None)


def technique_rounds(meta: dict, technique: dict) -> tuple[dict | None, dict | None]:
    """(the technique's "rounds" reference, the rounds set it names) for a time claim, or (None, None)."""
    ref = technique.get("rounds") or {}
    rset = rounds_set(meta, ref.get("set") or "")
    return (ref, rset) if rset and ref.get("strategy") and ref.get("versus") else (None, None)


def rounds_set_params(meta: dict, rset: dict, scale: int = 1, device: str | None = None,
                      only: tuple[str, ...] | None = None) -> dict:
    """The set's timing_rounds job (`only`: these strategies, in the set's order), `scale` times smaller on a
    CPU."""
    strategies = [(s["id"], over_preset(meta, s.get("config"), scale)) for s in rset["strategies"]
                  if only is None or s["id"] in only]
    return rounds_params(meta, strategies, device, spec=rset)


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
        jobs.append({"id": catalog.preset_id(lesson_id), "kind": "run", "params": over_preset(m, None),
                     "label": label("preset", "预设")})
        if m.get("profile"):
            jobs.append({"id": catalog.profile_id(lesson_id), "kind": "profile", "params": over_preset(m, None),
                         "label": label("profiler table of one step", "单步 profiler 表")})
    for kind, prompt in (m.get("prompts") or {}).items():
        if isinstance(prompt, dict) and prompt.get("try_change"):
            jobs.append({"id": catalog.try_id(lesson_id, kind), "kind": "run",
                         "params": over_preset(m, prompt["try_change"]),
                         "label": label(_describe(prompt["try_change"]), _describe(prompt["try_change"]))})
    for extra in m.get("extra_runs") or []:
        lab = extra.get("label") or {}
        jobs.append({"id": catalog.run_id(lesson_id, extra["id"]), "kind": "run",
                     "params": over_preset(m, extra.get("config")),
                     "label": label(localized(lab, "en", extra["id"]), localized(lab, "zh", extra["id"]))})
    for tech in m.get("techniques") or []:
        config, baseline = technique_configs(m, tech)
        for which, params in (("config", config), ("baseline", baseline)):
            jobs.append({"id": catalog.technique_id(lesson_id, tech["id"], which), "kind": "run", "params": params,
                         "label": {lang: f"{localized(tech.get('title'), lang, tech['id'])} "
                                         f"({'technique' if which == 'config' else 'baseline'})"
                                   for lang in ("en", "zh")}})
    strategies = []
    for s in m.get("strategies") or []:
        strategies.append((s["id"], over_preset(m, s.get("config"))))
        jobs.append({"id": catalog.run_id(lesson_id, s["id"]), "kind": "run", "params": strategies[-1][1],
                     "label": s.get("title") or {"en": s["id"], "zh": s["id"]}})
    if strategies and m.get("rounds"):
        jobs.append({"id": catalog.rounds_id(lesson_id), "kind": "timing_rounds",
                     "params": rounds_params(m, strategies),
                     "label": label("step time in interleaved rounds", "交替多轮计时")})
    for rset in rounds_sets(m):
        lab = rset.get("title") or {}
        jobs.append({"id": catalog.rounds_set_id(lesson_id, rset["id"]), "kind": "timing_rounds",
                     "params": rounds_set_params(m, rset),
                     "label": label(localized(lab, "en", rset["id"]), localized(lab, "zh", rset["id"]))})
    for s in m.get("leak_scenarios") or []:
        if isinstance(s, dict) and s.get("id"):  # defined here, not a reference
            jobs.append({"id": catalog.leak_id(s["id"]), "kind": "leak",
                         "params": {"scenario": s["id"], "steps": catalog.RECORDED_LEAK_STEPS},
                         "label": s.get("title") or s["id"]})
    for f in m.get("fragmentation") or []:
        jobs.append({"id": catalog.fragmentation_id(lesson_id, f["id"]), "kind": "fragmentation",
                     "params": dict(f["params"]), "label": f.get("label") or f["id"]})
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
            jobs.append({"id": catalog.data_parallel_id(lesson_id, folder, entry["id"]), "kind": "distributed",
                         "label": entry["title"], "params": params, "device": device, "folder": folder,
                         "strategy_id": entry["id"]})
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
        params = ExperimentConfig.from_dict(dict(params, device=device,
                                                 timing_steps=params.get("timing_steps", timing))).to_dict()
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
