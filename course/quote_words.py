"""What the words right around a quoted fact say about it, in both languages: its unit, the range its spread is shown
as, and the step and phase it was read at. Torch-free.

A fact's metric fixes its unit ("_mib" is MiB, "_pct" a percent, a ratio is "×" / 倍 / "times"): "{{peak_mib}} GiB"
quotes a MiB figure as GiB and fails. A paired fact's spread is shown as a range, lowest first: "between {{t.hi}}×
and {{t.lo}}×", or a range with one end missing, fails. A fact read at a step and a phase ("step 1's backward peaks
at {{x}} MiB") names them as the nearest step and phase before it in its sentence: "step 2's" or "forward" edited in
fails. tests/lessons/test_quote_words.py holds every lesson's prose to it."""

from __future__ import annotations

import re

from .directions import RATIOS
from .sentences import CELL, sentences

PLACEHOLDER = re.compile(r"\{\{(\w+)(?:\.(\w+))?\}\}")
# The units a text writes after a figure, each under the unit it is; "x" and "times" are a ratio's "×".
UNIT_WORDS = {
    "MiB": ("MiB",),
    "GiB": ("GiB",),
    "KiB": ("KiB",),
    "TiB": ("TiB",),
    "MB": ("MB",),
    "GB": ("GB",),
    "KB": ("KB",),
    "%": ("%", "％"),
    "ms": ("ms",),
    "s": ("s",),
    "bytes": ("bytes", "byte", "字节", "B"),
    "×": ("×", "x", "倍", "times"),
    "TFLOP/s": ("TFLOP/s",),
}
AFTER = re.compile(r"\s*\**\s*(TFLOP/s|MiB|GiB|KiB|TiB|MB|GB|KB|%|％|ms|s|bytes|byte|字节|B|×|x|倍|times)(?![\w/])")
# Ratios that are not a change of one quantity but still a multiple.
MULTIPLES = {"saving_ratio", "step_over_peak", "driver_outside_over_paged", "saving_vs_category"}


def unit(metric: str | None) -> str | None:
    """The unit a metric's figure is in, by its name; None for a count or a figure of no fixed unit."""
    if not metric:
        return None
    if metric in RATIOS or metric in MULTIPLES or metric.endswith("_ratio"):
        return "×"
    for suffix, name in (
        ("_mib", "MiB"),
        ("_gib", "GiB"),
        ("_kib", "KiB"),
        ("_gb", "GB"),
        ("_pct", "%"),
        ("_percent", "%"),
        ("_ms", "ms"),
        ("_bytes", "bytes"),
    ):
        if metric.endswith(suffix):
            return name
    return {"step_ms": "ms", "tflops": "TFLOP/s"}.get(metric)


def wrong_units(text: str, facts: dict) -> list[str]:
    """Each quoted fact followed by a unit other than its metric's."""
    out = []
    for m in PLACEHOLDER.finditer(text):
        spec = facts.get(m.group(1))
        if not spec or m.group(2) == "rounds":
            continue
        expected = unit(spec.get("metric"))
        after = AFTER.match(text, m.end())
        if expected is None or after is None:
            continue
        written = after.group(1)
        if written not in UNIT_WORDS[expected]:
            out.append(
                f"{m.group(0)} ({spec.get('metric')}, in {expected}) is written as {written!r}: {_around(text, m)}"
            )
    return out


def _around(text: str, m) -> str:
    return " ".join(text[max(0, m.start() - 60) : m.end() + 30].split())


# One end of a spread quoted as a bound: "at least {{t.lo}}×", "at most {{t.hi}}×".
BOUNDS = {"lo": ("at least", "至少", "不低于", "最低"), "hi": ("at most", "至多", "最多", "不超过", "最高")}


def _bound(before: str, end: str) -> bool:
    return any(w in before for w in BOUNDS[end])


def misordered_ranges(text: str) -> list[str]:
    """Each sentence that shows a paired fact's spread with one end only (not as a bound) or the highest first."""
    out = []
    for sentence in sentences(text, CELL):
        ends: dict[str, list[tuple[int, str]]] = {}
        for m in PLACEHOLDER.finditer(sentence):
            if m.group(2) in ("lo", "hi"):
                ends.setdefault(m.group(1), []).append((m.start(), m.group(2)))
        for name, marks in ends.items():
            marks = [(at, end) for at, end in marks if not _bound(sentence[max(0, at - 16) : at], end)]
            order = [end for _, end in sorted(marks)]
            if order.count("lo") != order.count("hi") or any(
                order[i : i + 2] != ["lo", "hi"] for i in range(0, len(order), 2)
            ):
                out.append(f"{name}'s range is {order}, not lowest then highest: {' '.join(sentence.split())}")
    return out


STEP = {
    "en": re.compile(r"\bstep[\s-]*(\d+)\b", re.IGNORECASE),
    "zh": re.compile(r"第\s*(\d+)\s*步"),
}
PHASE_NAMES = {
    "en": {
        "forward": ("forward",),
        "backward": ("backward",),
        "optimizer_step": ("optimizer_step", "optimizer step"),
        "zero_grad": ("zero_grad",),
    },
    "zh": {"forward": ("前向",), "backward": ("反向",), "optimizer_step": ("优化器更新",), "zero_grad": ("zero_grad",)},
}


def _last(pattern_hits: list[tuple[int, str]]) -> str | None:
    return max(pattern_hits)[1] if pattern_hits else None


def misnamed_moments(text: str, facts: dict, lang: str) -> list[str]:
    """Each fact read at a step and a phase whose sentence names another step or phase as the nearest before it."""
    out = []
    for sentence in sentences(text, CELL):
        for m in PLACEHOLDER.finditer(sentence):
            spec = facts.get(m.group(1)) or {}
            if m.group(2) or spec.get("phase") not in PHASE_NAMES[lang] or "versus_step" in spec:
                continue
            before = sentence[: m.start()]
            steps = [(s.start(), int(s.group(1))) for s in STEP[lang].finditer(before)]
            phases = [
                (p.start(), phase)
                for phase, words in PHASE_NAMES[lang].items()
                for w in words
                for p in re.finditer(rf"\b{re.escape(w)}\b" if lang == "en" else re.escape(w), before)
            ]
            step, phase = _last(steps), _last(phases)
            if (step is not None and step != spec.get("step")) or (phase is not None and phase != spec["phase"]):
                out.append(
                    f"{m.group(0)} is step {spec.get('step')}'s {spec['phase']}, its sentence says step {step}'s "
                    f"{phase}: {' '.join(sentence.split())}"
                )
    return out
