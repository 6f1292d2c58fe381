"""The "Fine-tuning memory" lesson's numbers: facts read off its replays (lessons/finetune/estimates.json, written by
`python benchmarks/finetune_methods.py --estimates ...`) and off the H200 runs of a plain transformers/peft/bitsandbytes
loop (lessons/finetune/h200_methods.jsonl, written by the same script on the GPU). meta.json names each fact once
under "model_facts":

    "lora_gib": {"h200": "llama3-8b-lora", "metric": "measured_gib", "format": ".1f", "min": 29, "max": 32}
    "ckpt_saving_pct": {"h200": "llama3-8b-lora", "versus": "llama3-8b-lora-ckpt", "metric": "measured_saving_pct"}
    "lora_act_gib": {"estimate": "lora", "metric": "category_gib", "category": "activations"}
    "max_peak_diff": {"h200_all": true, "metric": "max_abs_peak_diff_percent", "max": 1}
    "qlora_time": {"rounds": "qlora_over_lora", "metric": "paired_ratio", "format": ".2f", "min": 1}

A time ratio comes from paired rounds (lessons/finetune/h200_rounds.json, or h100_rounds.json where the fact says
"recording": "h100_rounds.json"; written by benchmarks/finetune_rounds.py on the GPU): {{qlora_time}} is the median
round's ratio, {{qlora_time.lo}}, {{qlora_time.hi}} and {{qlora_time.rounds}} its spread, and min/max hold for every
round.

min/max pin what the sentence around the number states (course/facts.py's rule). Torch-free."""

from __future__ import annotations

import functools
import json
import statistics

from course import content
from course.facts import PAIRED, model_facts, model_verdicts
from course.units import GIB

LESSON = "finetune"
H200_FILE = "h200_methods.jsonl"
ROUNDS_FILE = "h200_rounds.json"
ROUNDS_FILES = (ROUNDS_FILE, "h100_rounds.json")  # paired rounds recorded on an H100 where no H200 was lent
GB = 1e9  # the driver's view (nvidia-smi) is quoted in GB, as the recordings' text says
MB = 1e6


@functools.lru_cache(maxsize=4)
def _text(name: str) -> str:
    path = content.lessons_dir() / LESSON / name
    return path.read_text(encoding="utf-8") if path.exists() else ""


def estimates() -> dict:
    text = _text("estimates.json")
    return json.loads(text) if text else {}


def h200_rows() -> dict:
    return {r["case"]: r for r in (json.loads(line) for line in _text(H200_FILE).splitlines() if line.strip())}


def _measured(spec: dict, metric: str) -> float | None:
    rows = h200_rows()
    if spec.get("h200_all"):
        field = {
            "max_abs_peak_diff_percent": "peak_diff_percent",
            "max_abs_reserved_diff_percent": "reserved_diff_percent",
        }
        values = [abs(r[field[metric]]) for r in rows.values() if r.get(field[metric]) is not None]
        return max(values) if values else None
    row = rows.get(spec["h200"])
    if row is None or row.get("measured_peak_bytes") is None:
        return None
    if metric in ("measured_saving_pct", "measured_extra_gib"):
        other = rows.get(spec["versus"])
        if other is None:
            return None
        diff = row["measured_peak_bytes"] - other["measured_peak_bytes"]
        return 100 * diff / row["measured_peak_bytes"] if metric == "measured_saving_pct" else diff / GIB
    return {
        "measured_gib": row["measured_peak_bytes"] / GIB,
        "reserved_gib": row.get("reserved_bytes", 0) / GIB,
        "driver_outside_gb": _driver_outside(row) / GB if "driver_used_bytes" in row else None,
        "paged_gb": row.get("estimate_paged_bytes", 0) / GB,
        "driver_outside_over_paged": (
            _driver_outside(row) / row["estimate_paged_bytes"]
            if row.get("estimate_paged_bytes") and "driver_used_bytes" in row
            else None
        ),
        "peak_diff_percent": row.get("peak_diff_percent"),
        "reserved_diff_percent": row.get("reserved_diff_percent"),
    }.get(metric)


def _estimated(spec: dict, metric: str) -> float | None:
    e = estimates().get(spec["estimate"])
    if e is None:
        return None
    if metric in ("saving_gib", "category_saving_gib", "category_ratio", "category_share_of_saving"):
        other = estimates().get(spec["versus"])
        if other is None:
            return None
        if metric == "saving_gib":
            return (e["peak_bytes"] - other["peak_bytes"]) / GIB
        mine, theirs = e["categories"].get(spec["category"], 0), other["categories"].get(spec["category"], 0)
        if metric == "category_share_of_saving":  # how much of the peak's saving this category is, in percent
            return 100 * (mine - theirs) / (e["peak_bytes"] - other["peak_bytes"])
        return (mine - theirs) / GIB if metric == "category_saving_gib" else mine / theirs
    return {
        "peak_gib": e["peak_bytes"] / GIB,
        "category_gib": e["categories"].get(spec.get("category"), 0) / GIB,
        "host_gib": (e.get("host_peak_bytes") or 0) / GIB,
        "paged_mb": (e.get("paged_bytes") or 0) / MB,
        "trainable_pct": 100 * e["trainable_parameters"] / e["parameters"],
    }.get(metric)


METRICS = {
    "measured": (
        "measured_gib",
        "reserved_gib",
        "measured_saving_pct",
        "measured_extra_gib",
        "driver_outside_gb",
        "paged_gb",
        "driver_outside_over_paged",
        "peak_diff_percent",
        "reserved_diff_percent",
        "max_abs_peak_diff_percent",
        "max_abs_reserved_diff_percent",
    ),
    "estimated": (
        "peak_gib",
        "category_gib",
        "host_gib",
        "paged_mb",
        "trainable_pct",
        "saving_gib",
        "category_saving_gib",
        "category_ratio",
        "category_share_of_saving",
    ),
}


def rounds_summary(spec: dict) -> dict | None:
    """A paired fact's rounds: {"median", "lo", "hi", "rounds"} recomputed from the recorded ratios, or None. The
    rounds are the H200's (h200_rounds.json) unless the fact names another GPU's recording ("recording")."""
    recording = spec.get("recording", ROUNDS_FILE)
    if recording not in ROUNDS_FILES:
        raise ValueError(f"recording: got {recording!r}; allowed: {', '.join(ROUNDS_FILES)}")
    text = _text(recording)
    pair = (json.loads(text)["pairs"] if text else {}).get(spec.get("rounds"))
    if not pair or not pair.get("ratios"):
        return None
    ratios = pair["ratios"]
    return {"median": statistics.median(ratios), "lo": min(ratios), "hi": max(ratios), "rounds": len(ratios)}


def value(spec: dict) -> float | None:
    """The fact's number, or None where its data is not recorded (yet)."""
    metric = spec.get("metric")
    if "rounds" in spec:
        if metric != PAIRED:
            raise ValueError(f"a fact of paired rounds has metric {PAIRED}, got {metric!r}")
        summary = rounds_summary(spec)
        return summary and summary["median"]
    if "h200" in spec or spec.get("h200_all"):
        if metric not in METRICS["measured"]:
            raise ValueError(f"unknown metric {metric!r} of an H200 run; allowed: {', '.join(METRICS['measured'])}")
        return _measured(spec, metric)
    if metric not in METRICS["estimated"]:
        raise ValueError(f"unknown metric {metric!r} of an estimate; allowed: {', '.join(METRICS['estimated'])}")
    return _estimated(spec, metric)


def facts(meta: dict) -> dict[str, str]:
    return model_facts(meta, value, rounds_summary)


def verdicts(meta: dict) -> dict[str, bool | None]:
    return model_verdicts(meta, value, rounds_summary)


def table_rows() -> list[dict]:
    """The H200 runs of Llama-3-8B beside their estimates, one row each: the run's levers (as benchmarks/
    finetune_methods.py names them; the page words them), the measured and estimated peak and reserved memory in GiB,
    and what the driver saw beyond reserved."""
    rows = []
    for case, r in h200_rows().items():
        if not case.startswith("llama3-8b-"):
            continue
        rows.append(
            {
                "levers": r["levers"],
                "measured_gib": round(r["measured_peak_bytes"] / GIB, 2),
                "estimate_gib": round(r["estimate_peak_bytes"] / GIB, 2),
                "reserved_gib": round(r["reserved_bytes"] / GIB, 2),
                "driver_extra_gib": _driver_extra(r),
            }
        )
    return sorted(rows, key=lambda row: -row["measured_gib"])


# nvidia-smi's count starts after the process's first allocations (the baseline) and PyTorch's reserved figure does
# not: a difference this small says they agree, not that the driver saw less.
DRIVER_AGREES_GIB = 0.1


def _driver_outside(row: dict) -> int:
    """Bytes the driver saw beyond PyTorch's reserved memory (CUDA managed memory: a paged optimizer's state), both
    counted from before the build where the recording kept reserved there."""
    return row["driver_used_bytes"] - row["reserved_bytes"] + row.get("reserved_before_bytes", 0)


def _driver_extra(row: dict) -> float | str:
    """What nvidia-smi saw beyond reserved, in GiB ("≈ 0" within DRIVER_AGREES_GIB)."""
    extra = _driver_outside(row) / GIB
    return "≈ 0" if abs(extra) < DRIVER_AGREES_GIB else round(extra, 2)


def exercise_verdict(exercise: dict, cfg: dict, result: dict | None) -> tuple[bool, list[str]]:
    """The graded exercise (meta.json "exercise": the preset at full size, a shortest sequence, a card): (passed, what
    stands in the way). `result`: the check of cfg on the card (experiments/distributed/method_fits.py, own_only), its
    one row judged as "What fits" judges a batch. Reasons: "model" (another model, or its structure changed), "seq"
    (a shorter sequence than asked), "unchecked", "unpredicted", "too_big"."""
    reasons = []
    if cfg.get("model_source") != f"preset:{exercise['preset']}" or cfg.get("model_overrides"):
        reasons.append("model")
    if cfg.get("seq_len", 0) < exercise["min_seq_len"]:
        reasons.append("seq")
    rows = (result or {}).get("methods") or []
    if not rows:
        reasons.append("unchecked")
    elif rows[0]["runs"] is None:
        reasons.append("unpredicted")
    elif not rows[0]["runs"]:
        reasons.append("too_big")
    return not reasons, reasons


def setup_parts(levers: dict) -> list[tuple[str, dict]]:
    """A run's levers as the short phrases a table cell shows, each (string key, its parameters), in a fixed order:
    the method, LoRA's targets where not the attention, the optimizer where not AdamW, checkpointing, offloading."""
    parts = [(f"ft.short.finetune.{levers.get('finetune', 'full')}", {})]
    if levers.get("lora_targets") == "all_linear":
        parts.append(("ft.short.all_linear", {}))
    if levers.get("optimizer", "adamw") != "adamw":
        parts.append((f"ft.short.optimizer.{levers['optimizer']}", {}))
    if levers.get("checkpoint") == "per_layer":
        every = levers.get("checkpoint_every", 1)
        parts.append(("ft.short.ckpt_every", {"n": every}) if every > 1 else ("ft.short.ckpt", {}))
    if levers.get("offload_activations"):
        parts.append(("ft.short.offload", {}))
    return parts
