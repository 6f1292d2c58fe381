"""The direction a sentence states around a quoted number, in both languages. Torch-free.

A fact whose recorded bounds put it on one side of "no change" (a time ratio at or above 1 is slower, a memory ratio
at or below 1 is smaller, a saving at or above 0 % is less memory) has a direction; the clause that quotes it may use
the words of that direction or none, never the opposite's. tests/lessons/test_direction_words.py holds every lesson's
prose to it, so that "lowers" edited into "raises" (or 变慢 into 变快) fails against the recorded data, not only an
edited number."""

from __future__ import annotations

import re

RATIOS = {"paired_ratio": "time", "peak_ratio": "memory", "category_ratio": "memory"}
# A technique's saving against its baseline. Not the differences between two named setups (saving_gib,
# measured_extra_gib): which one a sentence makes its subject decides their direction, not the metric.
SAVINGS = {"peak_saving_pct": "memory", "measured_saving_pct": "memory"}

# What each direction is called, per language and quantity. English matches whole words, Chinese substrings.
WORDS = {
    "en": {
        ("memory", "up"): (
            "more",
            "larger",
            "higher",
            "raises",
            "raised",
            "adds",
            "added",
            "grows",
            "grew",
            "bigger",
            "increases",
            "increased",
            "rises",
            "rose",
        ),
        ("memory", "down"): (
            "less",
            "smaller",
            "lower",
            "lowers",
            "lowered",
            "saves",
            "saved",
            "cuts",
            "cut",
            "reduces",
            "reduced",
            "fewer",
            "shrinks",
            "shrank",
            "drops",
            "dropped",
            "falls",
            "fell",
        ),
        ("time", "up"): ("slower", "longer", "slows", "slowed"),
        ("time", "down"): ("faster", "quicker", "shorter", "speeds up", "sped up"),
    },
    "zh": {
        ("memory", "up"): ("增加", "提高", "升高", "上升", "增大", "更大", "变大", "高出", "更多", "多"),
        ("memory", "down"): (
            "降低",
            "下降",
            "减少",
            "节省",
            "省下",
            "降到",
            "更小",
            "变小",
            "更少",
            "少",
            "低",
            "小于",
        ),
        ("time", "up"): ("慢", "更长", "变长"),
        ("time", "down"): ("快", "更短", "缩短"),
    },
}
OPPOSITE = {"up": "down", "down": "up"}
CLAUSE_END = ".;:!?。；：！？\n|"
FACT = re.compile(r"\{\{(\w+)\}\}")


def direction(spec: dict) -> tuple[str, str] | None:
    """(quantity, "up" or "down") that a fact's bounds fix, or None where they fix no side of "no change"."""
    metric, lo, hi = spec.get("metric"), spec.get("min"), spec.get("max")
    if metric in RATIOS:
        quantity, neutral, sign = RATIOS[metric], 1, 1
    elif metric in SAVINGS:
        quantity, neutral, sign = SAVINGS[metric], 0, -1  # a saving above 0 is less memory
    else:
        return None
    if lo is not None and lo >= neutral:
        return quantity, "up" if sign > 0 else "down"
    if hi is not None and hi <= neutral:
        return quantity, "down" if sign > 0 else "up"
    return None


def found(words: tuple[str, ...], text: str, lang: str) -> list[str]:
    if lang == "en":
        return [w for w in words if re.search(rf"\b{w}\b", text, re.IGNORECASE)]
    return [w for w in words if w in text]


def clause(text: str, start: int, end: int) -> str:
    """The clause around text[start:end]: from the last clause end before it to the next one after it."""
    a = max(text.rfind(c, 0, start) for c in CLAUSE_END) + 1
    after = [i for i in (text.find(c, end) for c in CLAUSE_END) if i >= 0]
    return text[a : min(after, default=len(text))]


def contradictions(text: str, facts: dict, lang: str) -> list[str]:
    """Each clause of `text` that quotes a fact with a direction in the words of the opposite one."""
    out = []
    for m in FACT.finditer(text):
        spec = facts.get(m.group(1))
        way = direction(spec) if spec else None
        if way is None:
            continue
        quantity, side = way
        here = clause(text, m.start(), m.end())
        wrong = found(WORDS[lang][(quantity, OPPOSITE[side])], FACT.sub("", here), lang)
        if wrong:
            out.append(f"{m.group(1)} ({quantity} {side}) said with {wrong}: {here.strip()}")
    return out
