"""Exercise 1, graded: predictions of what is alive at the peak of a training step, against a real run.

The measured breakdown at the peak (result["breakdown"]: tensors of the run only, so net of the
baseline) decides; the estimate and the run's own phases explain each miss.
"""

from __future__ import annotations

from dataclasses import dataclass

from course.grading.common import message, names, number, section, tolerance_bytes, within
from course.units import MIB, fmt_bytes
from experiments.core import families, metrics
from experiments.core.config import ExperimentConfig
from experiments.core.vocabulary import CATEGORIES, PHASES

# The phases of a step that compute (forward, backward, the optimizer's update): each has a sentence of its own.
STEP_PHASES = PHASES[PHASES.index("forward") :]


@dataclass(frozen=True)
class Settings:
    """The exercise's settings (its meta.json "grading")."""

    fields: tuple[str, ...]  # the configuration fields the learner may change; the rest is the exercise's preset
    categories: tuple[str, ...]  # the categories the learner predicts at the peak
    max_mib: float  # the largest prediction the form takes
    tolerance: float  # a prediction counts within this share of the measured value...
    floor_bytes: int  # ...or within this absolute floor (small categories)
    tie_share: float  # phases whose peaks differ by less than this share of the run's peak are a tie

    @property
    def total(self) -> int:
        """The checks a grade makes: one per category, and the peak's phase."""
        return len(self.categories) + 1


def settings(meta: dict) -> Settings:
    g = section(meta)
    return Settings(
        fields=names(g, "fields", tuple(ExperimentConfig().to_dict()), meta),
        categories=names(g, "categories", CATEGORIES, meta),
        max_mib=float(number(g, "max_mib", 1, 10**9, meta)),
        tolerance=number(g, "tolerance", 0.0, 1.0, meta),
        floor_bytes=int(number(g, "floor_mib", 0.0, 1024.0, meta) * MIB),
        tie_share=number(g, "tie_share", 0.0, 1.0, meta),
    )


def validate(s: Settings, predictions: dict) -> list[dict]:
    """One message per unusable field (naming the field and the range); empty when all are usable."""
    errors = []
    for cat in s.categories:
        value = predictions.get(cat)
        if (
            value is None
            or isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not 0 <= value <= s.max_mib
        ):
            errors.append(message("ex1.err.mib", field=cat, lo=0, hi=f"{s.max_mib:,.0f}"))
    if predictions.get("phase") not in PHASES:
        errors.append(message("ex1.err.phase"))
    return errors


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "—"


def _phase_peaks(result: dict) -> dict[str, int]:
    peaks: dict[str, int] = {}
    for row in result.get("phases") or []:
        if row.get("peak_bytes") is not None:
            peaks[row["phase"]] = max(peaks.get(row["phase"], 0), row["peak_bytes"])
    return peaks


def tied_phases(s: Settings, result: dict) -> set[str]:
    """The peak's phase, and any phase whose own peak is within the tie share of it."""
    peak, phase = result.get("peak_bytes"), metrics.peak_phase(result)
    net = metrics.net_peak(result) or 0
    tied = {p for p, v in _phase_peaks(result).items() if peak is not None and peak - v <= s.tie_share * net}
    return tied | ({phase} if phase else set())


def grade(s: Settings, predictions: dict, result: dict, est: dict | None = None) -> dict:
    """predictions: MiB per category and "phase". Returns items (one per prediction) and the count right."""
    breakdown = result.get("breakdown") or {}
    config = result.get("config") or {}
    estimated = (est or {}).get("categories") or {}
    ctx = _context(result, config)
    items = []
    for cat in s.categories:
        measured = int(breakdown.get(cat, 0))
        predicted = float(predictions[cat]) * MIB
        ok = within(predicted, measured, s.tolerance, s.floor_bytes)
        items.append(
            {
                "field": cat,
                "ok": ok,
                "predicted": fmt_bytes(predicted),
                "measured": fmt_bytes(measured),
                "estimated": fmt_bytes(estimated[cat]) if cat in estimated else "—",
                "tolerance": fmt_bytes(tolerance_bytes(measured, s.tolerance, s.floor_bytes)),
                "why": _why(cat, measured, estimated.get(cat), ctx),
            }
        )
    phase = metrics.peak_phase(result)
    tied = tied_phases(s, result)
    items.append(
        {
            "field": "phase",
            "ok": predictions["phase"] in tied,
            "predicted": predictions["phase"],
            "measured": phase,
            "estimated": (est or {}).get("peak_phase") or "—",
            "tolerance": None,
            "tied": sorted(tied - {phase}),
            "why": _why_phase(result, phase),
        }
    )
    correct = sum(item["ok"] for item in items)
    return {"items": items, "correct": correct, "total": len(items), "solved": correct == len(items)}


def _context(result: dict, config: dict) -> dict:
    breakdown = result.get("breakdown") or {}
    accum = int(config.get("accum") or 1)
    return {
        "phase": metrics.peak_phase(result) or "?",
        "params": int(breakdown.get("parameters", 0)),
        "micro_batch": int(config.get("batch") or 0) // accum,
        "optimizer": config.get("optimizer", "?"),
        "layers": config.get("layers"),
        "width": config.get("width"),
        # What one forward pass keeps for backward: the growth of the steady step's forward phase.
        "forward": metrics.phase_growth(result, 2, "forward"),
    }


def _why(cat: str, measured: int, estimated: int | None, ctx: dict) -> list[dict]:
    est = fmt_bytes(estimated) if estimated is not None else "—"
    params, phase = ctx["params"], ctx["phase"]
    if cat == "parameters":
        out = [message("ex1.why.parameters", measured=fmt_bytes(measured), estimated=est)]
        if ctx["layers"] and ctx["width"]:
            count = ctx["layers"] * (ctx["width"] ** 2 + ctx["width"])
            out.append(
                message(
                    "ex1.why.parameters_count",
                    layers=ctx["layers"],
                    width=ctx["width"],
                    count=f"{count:,}",
                    bytes=fmt_bytes(4 * count),
                )
            )
        return out
    if cat == "gradients":
        if measured == 0:
            return [message("ex1.why.gradients_none", phase=phase)]
        key = "ex1.why.gradients_partial" if measured < 0.99 * params else "ex1.why.gradients_full"
        return [message(key, phase=phase, measured=fmt_bytes(measured), ratio=_ratio(measured, params), estimated=est)]
    if cat == "optimizer_state":
        # What this optimizer keeps per parameter, said of the optimizer by name (the measured ratio is beside it).
        return [
            message(
                "ex1.why.state",
                optimizer=ctx["optimizer"],
                measured=fmt_bytes(measured),
                ratio=_ratio(measured, params),
                estimated=est,
            ),
            message(f"ex1.why.state.{ctx['optimizer']}", fallback="ex1.why.state.other"),
        ]
    if cat != "activations":
        return []  # a category without a sentence of its own: the measured and estimated figures say it
    forward = fmt_bytes(ctx["forward"]) if ctx["forward"] is not None else "—"
    if measured == 0:
        return [message("ex1.why.activations_gone", phase=phase, forward=forward, micro_batch=ctx["micro_batch"])]
    per_sample = fmt_bytes(measured / ctx["micro_batch"]) if ctx["micro_batch"] else "—"
    return [
        message(
            "ex1.why.activations_alive",
            phase=phase,
            measured=fmt_bytes(measured),
            micro_batch=ctx["micro_batch"],
            per_sample=per_sample,
            estimated=est,
        )
    ]


def _why_phase(result: dict, phase: str | None) -> list[dict]:
    largest = metrics.largest_category(result)
    step = (result.get("peak_phase") or {}).get("step") or "?"
    out = [
        message(
            "ex1.why.phase",
            phase=phase or "?",
            step=step,
            category=largest[0] if largest else "?",
            size=fmt_bytes(largest[1]) if largest else "—",
        )
    ]
    if phase in STEP_PHASES:
        out.append(message(f"ex1.why.phase_{phase}"))
    return out


def sized_words(full: ExperimentConfig, sized: ExperimentConfig, k: int) -> dict[str, str]:
    """The numbers of the CPU-sized graded run and of the lesson's full-size model, for the page's size note: a
    learner who computes the lesson's model must see that the form's smaller one is what is graded."""
    words = {"k": str(k)}
    for prefix, cfg in (("full_", full), ("", sized)):
        words.update(
            {
                prefix + "layers": str(cfg.layers),
                prefix + "width": str(cfg.width),
                prefix + "batch": str(cfg.batch),
                prefix + "params": fmt_bytes(families.parameter_bytes(cfg)),
            }
        )
    return words
