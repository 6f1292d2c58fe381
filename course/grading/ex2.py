"""Exercise 2, graded: a memory budget challenge. Fit (measured), gradient correctness (the guard) and speed,
scored against the best known choice.

Speed is graded the way lesson 5 teaches: the learner's choice, the unoptimized baseline and the estimator's most
promising choices that fit are timed in interleaved rounds of one job, run at grading time, and compared round by
round (experiments/core/rounds.py: paired). The best known choice is the fastest *measured* in those rounds among
the choices that fit: a prediction only picks which choices to time."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from course.grading.common import SettingsError, message, number, section
from course.units import MIB, fmt_bytes
from experiments.core import metrics
from experiments.core.config import CHOICES, RANGES, ConfigError, ExperimentConfig
from experiments.core.rounds import LIMITS as ROUND_LIMITS
from experiments.core.rounds import VERDICT_MIN_ROUNDS, paired, too_busy

CHECKS = ("fit", "correct", "fast")
DEVICE_TYPES = ("cuda", "cpu")


@dataclass(frozen=True)
class Settings:
    """The exercise's settings (its meta.json "grading"): the GPU challenge (the preset with its changes, in a
    budget), the CPU version of it, the options the learner picks from, and the speed slack."""

    gpu_base: dict
    gpu_budget: int
    cpu_base: dict
    options: dict  # field -> values, or {device type: values}: what the learner picks and the best is searched over
    speed_slack: float  # step times this close to the best known choice's count as as fast
    compare: int  # how many of the estimator's most promising fitting choices are timed beside the learner's
    rounds: dict  # device type -> {"rounds", "steps", "warmup"}: the grading's timing rounds

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(self.options)

    @property
    def total(self) -> int:
        return len(CHECKS)


def _config(meta: dict, name: str, data: dict) -> dict:
    """`data`, once the engine's rules accept it as a configuration."""
    try:
        ExperimentConfig.from_dict(data)
    except (ConfigError, TypeError) as exc:
        raise SettingsError(f"{meta.get('id', '?')}/meta.json grading.{name}: {exc}") from None
    return data


def _values(meta: dict, field: str, values) -> tuple:
    """A list of values the learner may pick for a configuration field: its choices, or integers in its range."""
    if field in CHOICES:
        allowed, said = CHOICES[field], ", ".join(CHOICES[field])
    elif field in RANGES:
        (lo, hi), said = RANGES[field], "integers in [{}, {}]".format(*RANGES[field])
        allowed = range(lo, hi + 1)
    else:
        allowed, said = (), "nothing: not a field the learner picks from a list"
    if not isinstance(values, list) or not values or any(isinstance(v, bool) or v not in allowed for v in values):
        raise SettingsError(f"{meta.get('id', '?')}/meta.json grading.options.{field}: got {values!r}; allowed: {said}")
    return tuple(values)


def settings(meta: dict) -> Settings:
    g = section(meta)
    gpu, cpu = g.get("gpu") or {}, g.get("cpu") or {}
    gpu_base = _config(meta, "gpu.config", {**(meta.get("preset") or {}), **(gpu.get("config") or {})})
    cpu_base = _config(meta, "cpu.config", {**gpu_base, **(cpu.get("config") or {})})
    options = {}
    for field, values in (g.get("options") or {}).items():
        if isinstance(values, dict):
            if set(values) != set(DEVICE_TYPES):
                raise SettingsError(
                    f"{meta.get('id', '?')}/meta.json grading.options.{field}: per device, give "
                    f"exactly {', '.join(DEVICE_TYPES)}"
                )
            options[field] = {d: _values(meta, field, values[d]) for d in DEVICE_TYPES}
        else:
            options[field] = _values(meta, field, values)
    if not options:
        raise SettingsError(f"{meta.get('id', '?')}/meta.json grading.options: no option for the learner to pick")
    return Settings(
        gpu_base=gpu_base,
        gpu_budget=int(number(gpu, "budget_mib", 1, 10**7, meta) * MIB),
        cpu_base=cpu_base,
        options=options,
        speed_slack=number(g, "speed_slack", 0.0, 1.0, meta),
        compare=int(number(g, "compare", 1, 6, meta, integer=True)),
        rounds={d: _rounds(meta, g, d) for d in DEVICE_TYPES},
    )


def _rounds(meta: dict, g: dict, device_type: str) -> dict:
    """The grading's timing rounds on `device_type`: enough rounds for a verdict, within what the timing job takes."""
    where = f"{meta.get('id', '?')}/meta.json grading.rounds.{device_type}"
    spec = (g.get("rounds") or {}).get(device_type)
    if not isinstance(spec, dict):
        raise SettingsError(f"{where}: give rounds, steps and warmup")
    out = {}
    for name, (lo, hi) in ROUND_LIMITS.items():
        lo = max(lo, VERDICT_MIN_ROUNDS) if name == "rounds" else lo  # fewer rounds give no verdict to grade by
        value = spec.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise SettingsError(f"{where}.{name}: got {value!r}; allowed range is [{lo}, {hi}] (an integer)")
        out[name] = value
    return out


def options(s: Settings, field: str, device_type: str) -> tuple:
    values = s.options[field]
    return values[device_type] if isinstance(values, dict) else values


def grid(s: Settings, device_type: str) -> list[dict]:
    """Every combination of the options: what the learner picks from and the best known choice is searched over."""
    return [
        dict(zip(s.fields, combo, strict=True))
        for combo in itertools.product(*(options(s, f, device_type) for f in s.fields))
    ]


def challenge(s: Settings, device_type: str, estimate) -> dict:
    """The challenge for this device. `estimate(config: dict, device_type: str) -> estimate dict`.

    On a CPU the budget is the GPU budget's share of the GPU baseline's estimated peak, applied to the CPU
    baseline's estimated peak: the same squeeze, at a size that runs in seconds."""
    if device_type == "cuda":
        return {"base": dict(s.gpu_base), "budget": s.gpu_budget, "scaled": False}
    gpu_peak = estimate(s.gpu_base, "cuda")["peak_bytes"]
    cpu_peak = estimate(s.cpu_base, "cpu")["peak_bytes"]
    share = s.gpu_budget / gpu_peak
    budget = math.ceil(share * cpu_peak / (MIB / 16)) * (MIB / 16)  # in 1/16 MiB, so the page shows it exactly
    return {
        "base": dict(s.cpu_base),
        "budget": int(budget),
        "scaled": True,
        "share": share,
        "gpu_peak": gpu_peak,
        "cpu_peak": cpu_peak,
    }


def config_of(base: dict, choice: dict) -> dict:
    return {**base, **choice}


def run_config(base: dict, choice: dict) -> dict:
    """The learner's measured run: its memory and gradients are graded, its time comes from the rounds, so it times
    no extra steps."""
    return {**config_of(base, choice), "timing_steps": 0}


def choice_of(s: Settings, config: dict) -> dict:
    return {f: config.get(f) for f in s.fields}


def choice_id(s: Settings, choice: dict) -> str:
    """A choice's strategy id in the rounds: its values, so that the same choice is timed once."""
    return ",".join(f"{f}={choice[f]}" for f in s.fields)


def shortlist(s: Settings, base: dict, budget: int, device_type: str, estimate, step_ms=None, progress=None) -> dict:
    """The choices of the grid worth timing: the `s.compare` fitting ones (by the estimated peak) that promise the
    shortest step. A promise only: the rounds decide which is fastest.

    Ranked by `step_ms(est, precision)`, the step time predicted from the replay's work and the device's measured
    rates (None where it cannot be predicted); without it, by the work itself (FLOPs, then kernels).
    `estimate(config: dict, device_type) -> estimate dict`."""
    rows = []
    choices = grid(s, device_type)
    for i, choice in enumerate(choices):
        est = estimate(config_of(base, choice), device_type)
        step = est.get("step") or {}
        rows.append(
            {
                "choice": choice,
                "peak_bytes": int(est["peak_bytes"]),
                "fits": est["peak_bytes"] <= budget,
                "ms": step_ms(est, choice["precision"]) if step_ms and step else None,
                "work": (step.get("flops", 0), step.get("kernels", 0)),
            }
        )
        if progress:
            progress(i + 1, len(choices))
    fitting = [r for r in rows if r["fits"]]
    by_time = step_ms is not None and all(r["ms"] is not None for r in fitting)
    fitting.sort(key=(lambda r: (r["ms"], r["peak_bytes"])) if by_time else (lambda r: (r["work"], r["peak_bytes"])))
    return {
        "choices": [{k: r[k] for k in ("choice", "peak_bytes", "ms")} for r in fitting[: s.compare]],
        "ranked_by": "time" if by_time else "work",
        "fitting": len(fitting),
        "considered": len(rows),
        "lowest_peak": min(r["peak_bytes"] for r in rows) if rows else None,
    }


def rounds_job(s: Settings, base: dict, choice: dict, short: dict, device_type: str) -> tuple[dict, dict]:
    """(the timing_rounds job's parameters, role -> strategy id): the baseline first (every ratio is over it),
    then the learner's choice, then the shortlist; a choice that is several of these is timed once."""
    baseline, candidate = choice_of(s, base), dict(choice)
    compared = [c["choice"] for c in short["choices"]]
    picks: dict[str, dict] = {}
    for c in (baseline, candidate, *compared):
        picks.setdefault(choice_id(s, c), c)
    params = {
        "strategies": [{"id": sid, "config": config_of(base, c)} for sid, c in picks.items()],
        **s.rounds[device_type],
    }
    roles = {
        "baseline": choice_id(s, baseline),
        "candidate": choice_id(s, candidate),
        "compared": [choice_id(s, c) for c in compared],
    }
    return params, roles


def fastest(rounds: dict, ids: list[str]) -> str | None:
    """Of `ids`, the one the rounds measured fastest: the lowest median over rounds of its step time over the first
    strategy's in the same round (the ratio cancels what drifts between rounds)."""
    first = ((rounds.get("strategies") or [{}])[0]).get("id")
    timed = []
    for i, sid in enumerate(ids):
        summary = paired(rounds, sid, first) if first else None
        if summary:
            timed.append((summary["median"], i, sid))
    return min(timed)[2] if timed else None


def _median_ms(rounds: dict | None, sid: str) -> float | None:
    rows = [r for r in (rounds or {}).get("strategies") or [] if r.get("id") == sid]
    return rows[0].get("median_ms") if rows else None


def assess(s: Settings, candidate: dict, guard: dict | None, rounds: dict | None, roles: dict, budget: int) -> dict:
    """Fit (the learner's measured run), correctness (the guard) and speed (the rounds); a score out of 100 against
    the best known choice: the fastest measured in the rounds of the shortlist and the learner's choice, where it
    fits. Fast unless the rounds show the learner's choice slower than that best in every round, by more than the
    slack."""
    peak = metrics.net_peak(candidate)
    oom = bool(candidate.get("oom"))
    fit = not oom and peak is not None and peak <= budget
    correct = bool(guard and guard.get("ok"))
    cand, base = roles["candidate"], roles["baseline"]
    eligible = [sid for sid in roles["compared"] if sid != cand] + ([cand] if fit else [])
    best = fastest(rounds, eligible) if rounds else None
    vs_best = paired(rounds, cand, best) if best and best != cand else None
    vs_base = paired(rounds, cand, base) if rounds and cand != base else None
    measured = best == cand or vs_best is not None
    # Rounds on an oversubscribed machine judge no speed: fit and correctness are graded, speed waits for a calmer one.
    judged = bool(rounds) and not too_busy(rounds)
    slower = bool(vs_best and vs_best["verdict"] == "slower" and vs_best["median"] > 1 + s.speed_slack)
    fast = measured and not slower
    checks = dict(zip(CHECKS, (fit, correct, fit and correct and fast and judged), strict=True))
    score = 0
    if fit and correct and measured and judged:
        score = 100 if fast else round(100 / vs_best["median"])
    elif fit and correct and rounds and not judged:
        score = None  # no speed, no score: the page says why
    why = []
    largest = metrics.largest_category(candidate)
    if oom:
        why.append(message("ex2.why.oom"))
    elif not fit and peak is not None:
        why.append(
            message(
                "ex2.why.over",
                peak=fmt_bytes(peak),
                budget=fmt_bytes(budget),
                over=fmt_bytes(peak - budget),
                category=largest[0] if largest else "?",
                size=fmt_bytes(largest[1]) if largest else "—",
            )
        )
    if guard is None:
        why.append(message("ex2.why.no_guard"))
    elif not correct:
        why.append(
            message(
                "ex2.why.wrong",
                rel=f"{guard.get('max_rel_diff', float('nan')):.2e}",
                tol=f"{guard.get('tolerance', float('nan')):.0e}",
                precision=guard.get("precision", "?"),
            )
        )
    if rounds is None:
        why.append(message("ex2.why.no_rounds"))
    elif not judged:
        why.append(message("ex2.why.busy"))
    if vs_base:
        why.append(message("ex2.why.speed", **_ratio_args(vs_base)))
    if vs_best and fit and correct and slower and judged:
        why.append(message("ex2.why.slower", **_ratio_args(vs_best)))
    return {
        "checks": checks,
        "passed": sum(checks.values()),
        "score": score,
        "peak": peak,
        "why": why,
        "best": best,
        "eligible": eligible,
        "vs_best": vs_best,
        "vs_base": vs_base,
        "ms": _median_ms(rounds, cand),
        "best_ms": _median_ms(rounds, best) if best else None,
        "solved": all(checks.values()),
        "speed_judged": judged,
    }


def _ratio_args(summary: dict) -> dict:
    return {
        "ratio": f"{summary['median']:.2f}",
        "lo": f"{summary['lo']:.2f}",
        "hi": f"{summary['hi']:.2f}",
        "rounds": summary["rounds"],
        "slower": summary["slower"],
    }
