"""Reads lesson texts and settings from lessons/<id>/ at runtime (no Streamlit here)."""

from __future__ import annotations

import json
import os
import re
from functools import lru_cache
from pathlib import Path

from course import catalog
from experiments.core.config import ExperimentConfig

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
            return (joined_cjk_lines(text) if candidate == "zh" else text), candidate
    return None, None


# Markdown turns a line break inside a paragraph into a space, which Chinese does not put between characters
# ("一步 用时"): a break between two CJK characters or punctuation marks is dropped, outside code blocks.
_CJK_BREAK = re.compile(
    r"(?<=[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef])\n(?=[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef])"
)


def joined_cjk_lines(text: str) -> str:
    parts = text.split("```")
    return "```".join(p if i % 2 else _CJK_BREAK.sub("", p) for i, p in enumerate(parts))


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
DEFAULT_HEADS = ExperimentConfig.heads


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
    # A transformer's width must be a multiple of heads x 8 (its head dimension a multiple of 8).
    step = int(out.get("heads") or DEFAULT_HEADS) * 8
    if out.get("model") == "transformer" and "width" in out and out["width"] % step:
        out["width"] = max(step, out["width"] // step * step)
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
    defined = {
        s["id"]: s for s in meta(catalog.LEAK_LESSON).get("leak_scenarios") or [] if isinstance(s, dict) and s.get("id")
    }
    out = []
    for entry in listed:
        if isinstance(entry, str) and entry in defined:
            out.append(defined[entry])
        elif isinstance(entry, dict) and entry.get("id"):
            out.append(entry)
    return out


def rounds_params(
    meta: dict, strategies: list[tuple[str, dict]], device: str | None = None, spec: dict | None = None
) -> dict:
    """A timing_rounds job over `strategies`; rounds, steps and warm-up from `spec` (default: meta "rounds")."""
    cfg = spec if spec is not None else meta.get("rounds") or {}
    items = [{"id": sid, "config": dict(c, device=device) if device else c} for sid, c in strategies]
    return {
        "strategies": items,
        "rounds": int(cfg.get("rounds", 3)),
        "steps": int(cfg.get("steps", 10)),
        "warmup": int(cfg.get("warmup", 2)),
    }


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


def rounds_set_params(
    meta: dict, rset: dict, scale: int = 1, device: str | None = None, only: tuple[str, ...] | None = None
) -> dict:
    """The set's timing_rounds job (`only`: these strategies, in the set's order), `scale` times smaller on a
    CPU."""
    strategies = [
        (s["id"], over_preset(meta, s.get("config"), scale))
        for s in rset["strategies"]
        if only is None or s["id"] in only
    ]
    return rounds_params(meta, strategies, device, spec=rset)
