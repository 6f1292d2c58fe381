"""The "Your model" lesson's numbers: facts read off the replays it shows (lessons/yourmodel/estimates.json, written by
`python benchmarks/model_presets.py --estimates ...`) and off the H200 check (lessons/yourmodel/h200_presets.json,
written by the same script on the GPU). meta.json names each fact once under "model_facts":

    "bf16_bytes": {"estimate": "llama3-8b-s2048-fused", "metric": "bytes_per_parameter", "format": ".1f",
                   "min": 7.9, "max": 8.1}
    "ckpt_saving_2048": {"estimate": "llama3-8b-s2048-fused", "versus": "llama3-8b-s2048-fused-ckpt",
                         "metric": "saving_gib", "format": ".2f", "max": 1}
    "h200_fused": {"h200": "llama3-8b-bf16-fused", "metric": "measured_gib", "format": ".1f", "min": 59, "max": 61}

min/max pin what the sentence around the number states (course/facts.py's rule). Torch-free."""

from __future__ import annotations

import functools
import itertools
import json

from course import content
from course.facts import model_facts, model_verdicts
from course.units import GIB
from experiments.core import model_sources

LESSON = "yourmodel"
# The heads a Hugging Face model_type may be trained with (hf:NAME:HEAD), in the order a bare name picks one.
HEADS = model_sources.HF_TASKS
METRICS = (
    "peak_gib",
    "bytes_per_parameter",
    "step_bytes_per_parameter",
    "formula_gib",
    "formula_over_peak",
    "formula8_gib",
    "formula8_miss_gib",
    "step_over_peak",
    "saving_gib",
    "saving_ratio",
    "measured_gib",
    "peak_diff_percent",
    "reserved_diff_percent",
    "scratch_peak_diff_percent",
    "parameters_b",
    # The default allocator's verdict batch by batch near a card's limit (lessons/yourmodel/band_h100.json).
    "first_failure",
    "runs_from",
    "runs_to",
    "larger_ran",
    "tried_above",
    "over_card_mb_max",
    "oom_errors",
)


@functools.lru_cache(maxsize=4)
def _data(name: str) -> dict:
    path = content.lessons_dir() / LESSON / name
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def estimates() -> dict:
    return _data("estimates.json")


def h200_rows() -> dict:
    return {row["case"]: row for row in _data("h200_presets.json").get("rows", [])}


def _one(e: dict, metric: str) -> float | None:
    n = e["parameters"]
    return {
        "peak_gib": e["peak_bytes"] / GIB,
        "bytes_per_parameter": e["bytes_per_parameter"],
        "step_bytes_per_parameter": e["optimizer_step_peak_bytes"] / n,
        "formula_gib": e["formula_bytes"] / GIB,
        "formula_over_peak": e["formula_bytes"] / e["peak_bytes"],
        # The rule for pure bf16 AdamW (2 + 2 + 2 x 2 bytes per parameter), and what the replay finds beyond it.
        "formula8_gib": 8 * n / GIB,
        "formula8_miss_gib": (e["peak_bytes"] - 8 * n) / GIB,
        "step_over_peak": e["optimizer_step_peak_bytes"] / e["peak_bytes"],
        "parameters_b": n / 1e9,
    }.get(metric)


def diffs(row: dict) -> dict:
    """A recorded row's estimate against its measurement, in % of the measured figure, from the bytes themselves (the
    page recomputes them, so a figure stored beside the data is never what it quotes)."""
    out, m = {}, row.get("measured_peak_bytes")
    if m and row.get("estimate_peak_bytes"):
        out["peak_diff_percent"] = round(100 * (row["estimate_peak_bytes"] - m) / m, 4)
    if m and row.get("scratch_peak_bytes"):
        out["scratch_peak_diff_percent"] = round(100 * (row["scratch_peak_bytes"] - m) / m, 4)
    reserved = row.get("reserved_bytes")
    if reserved and row.get("scratch_reserved_bytes"):
        out["scratch_reserved_diff_percent"] = round(100 * (row["scratch_reserved_bytes"] / reserved - 1), 3)
    if reserved and row.get("estimate_reserved_bytes"):
        out["reserved_diff_percent"] = round(100 * (row["estimate_reserved_bytes"] / reserved - 1), 3)
    return out


def band() -> dict:
    return _data("band_h100.json")


def band_value(metric: str) -> float | None:
    """A figure of the recorded trials batch by batch, computed from their verdicts: the first batch that did not run
    above one that did; the run of consecutive batches tried and run after it (its first and last); how many larger
    batches were tried and how many of them ran; how far past the card the failures ended (MB) and how many raised
    an out-of-memory error."""
    trials = {t["batch"]: t for t in band().get("trials", [])}
    batches = sorted(trials)
    fail = next((b for a, b in itertools.pairwise(batches) if trials[a]["ran"] and not trials[b]["ran"]), None)
    if fail is None:
        return None
    start = next((b for b in batches if b > fail and trials[b]["ran"]), None)
    end = start
    while end is not None and end + 1 in trials and trials[end + 1]["ran"]:
        end += 1
    failed = [trials[b] for b in batches if not trials[b]["ran"]]
    return {
        "first_failure": fail,
        "runs_from": start or 0,  # 0: none ran above it (the sentence's claim is then false, not unrecorded)
        "runs_to": end or 0,
        "larger_ran": sum(trials[b]["ran"] for b in batches if b > fail),
        "tried_above": sum(b > fail for b in batches),
        "over_card_mb_max": max((t["held_bytes"] - band()["card_bytes"]) / 1e6 for t in failed),
        "oom_errors": sum(bool(t["oom"]) for t in failed),
    }[metric]


def value(spec: dict) -> float | None:
    """The fact's number, or None where its data is not recorded (yet)."""
    metric = spec.get("metric")
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; allowed: {', '.join(METRICS)}")
    if "band" in spec:
        return band_value(metric)
    if "h200" in spec:
        row = h200_rows().get(spec["h200"])
        if row is None or row.get("measured_peak_bytes") is None:
            return None
        return row["measured_peak_bytes"] / GIB if metric == "measured_gib" else diffs(row).get(metric)
    e = estimates().get(spec.get("estimate"))
    if e is None:
        return None
    if metric in ("saving_gib", "saving_ratio"):
        other = estimates().get(spec.get("versus"))
        if other is None:
            return None
        saved = e["peak_bytes"] - other["peak_bytes"]
        if metric == "saving_gib":
            return saved / GIB
        # This pair's saving against another pair's: which lever is the bigger one.
        a, b = estimates().get(spec["against"]), estimates().get(spec["against_versus"])
        return None if a is None or b is None else saved / (a["peak_bytes"] - b["peak_bytes"])
    return _one(e, metric)


def facts(meta: dict) -> dict[str, str]:
    return model_facts(meta, value)


def verdicts(meta: dict) -> dict[str, bool | None]:
    return model_verdicts(meta, value)


def table_rows() -> list[dict]:
    """The recorded estimates, one row each, for the page's table: model (its preset's id), precision, sequence,
    levers (their ids: the page words them), peak in GiB and bytes per parameter at the optimizer step's peak."""
    rows = []
    for e in estimates().values():
        c = e["config"]
        rows.append(
            {
                "model": c["model_source"].split(":")[1],
                "precision": c["precision"],
                "seq_len": c["seq_len"],
                "optimizer_impl": c["optimizer_impl"],
                "checkpoint": "✓" if c["checkpoint"] != "none" else "",
                "peak_gib": round(e["peak_bytes"] / GIB, 2),
                "bytes_per_parameter": round(e["optimizer_step_peak_bytes"] / e["parameters"], 1),
            }
        )
    return rows


def presets() -> dict:
    """The model presets (experiments/core/model_sources.py's data file): id -> title (en, zh), source, levers."""
    return model_sources.presets()


def defaults(source: str) -> dict:
    """The levers a preset (or its tiny variant) opens with."""
    kind, name, size = model_sources.parse_source(source)
    return model_sources.preset_config(name, size == "tiny")[1] if kind == "preset" else {}
