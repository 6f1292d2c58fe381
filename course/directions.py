"""The direction a sentence states around a quoted number, and the whole a quoted share is of, in both languages.

A fact whose recorded bounds put it on one side of "no change" (a time ratio at or above 1 is slower, a memory ratio
at or below 1 is smaller, a saving at or above 0 % is less memory) has a direction; the clause that quotes it may use
the words of that direction or none, never the opposite's. tests/lessons/test_direction_words.py holds every lesson's
prose to it, so that "lowers" edited into "raises" (or 变慢 into 变快) fails against the recorded data, not only an
edited number."""

from __future__ import annotations

import re

from .sentences import SENTENCE, clause, joined_lines, sentence_of

RATIOS = {
    "paired_ratio": "time",
    "step_time_ratio": "time",
    "peak_ratio": "memory",
    "category_ratio": "memory",
    "phase_peak_ratio": "memory",
    "phase_peak_pair_ratio": "memory",
}
# A technique's saving against its baseline: above 0 is less memory. Any fact whose sentence makes the other setup its
# subject says so with "subject": "other" (below).
SAVINGS = {"peak_saving_pct": "memory", "measured_saving_pct": "memory"}
# Differences between two named setups, in bytes: (quantity, the sign that means "up" for the setup the sentence is
# about). A saving (saving_gib: the case less its "versus") is said of the setup that saves, the "versus" one; an extra
# (measured_extra_gib) of the case that needs more. A fact whose sentence makes the other setup its subject says so
# with "subject": "other" ("LoRA's is 9 GiB above QLoRA's" quotes a saving of QLoRA's as LoRA's excess).
DIFFERENCES = {
    "saving_gib": ("memory", -1),
    "category_saving_gib": ("memory", -1),
    "saved_mib": ("memory", -1),
    "measured_extra_gib": ("memory", 1),
}

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
            "above",
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
            "below",
        ),
        ("time", "up"): ("slower", "longer", "slows", "slowed"),
        ("time", "down"): ("faster", "quicker", "shorter", "speeds up", "sped up"),
    },
    "zh": {
        ("memory", "up"): ("增加", "提高", "升高", "上升", "增大", "更大", "变大", "高出", "更多", "多", "高"),
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
# A quoted fact, or its spread ({{name.lo}}, {{name.hi}}, {{name.rounds}}): the spread states the fact's direction too
# ("slower in every round (between {{t.lo}} and {{t.hi}} times)").
FACT = re.compile(r"\{\{(\w+)(?:\.(?:lo|hi|rounds))?\}\}")


def direction(spec: dict) -> tuple[str, str] | None:
    """(quantity, "up" or "down") that a fact's bounds fix, or None where they fix no side of "no change"."""
    metric, lo, hi = spec.get("metric"), spec.get("min"), spec.get("max")
    if metric in RATIOS:
        quantity, neutral, sign = RATIOS[metric], 1, 1
    elif metric in SAVINGS:
        quantity, neutral, sign = SAVINGS[metric], 0, -1  # a saving above 0 is less memory
    elif metric in DIFFERENCES:
        (quantity, sign), neutral = DIFFERENCES[metric], 0
    else:
        return None
    # A sentence about the other setup: "**faster**: fp32 took {{t}}× as long" says a time ratio of fp32 over AMP as AMP's
    sign = -sign if spec.get("subject") == "other" else sign
    if lo is not None and lo >= neutral:
        return quantity, "up" if sign > 0 else "down"
    if hi is not None and hi <= neutral:
        return quantity, "down" if sign > 0 else "up"
    return None


def found(words: tuple[str, ...], text: str, lang: str) -> list[str]:
    if lang == "en":
        return [w for w in words if re.search(rf"\b{w}\b", text, re.IGNORECASE)]
    return [w for w in words if w in text]


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
        if not wrong and quantity == "time":
            # A time's direction may be said anywhere in its sentence ("**AMP is slower too** at this size, in every
            # round, by less: about {{t}}×"): the sentence says the opposite's words and none of its own.
            here = sentence_of(text, m.start())
            said = FACT.sub("", here)
            if not found(WORDS[lang][way], said, lang):
                wrong = found(WORDS[lang][(quantity, OPPOSITE[side])], said, lang)
        if wrong:
            out.append(f"{m.group(1)} ({quantity} {side}) said with {wrong}: {here.strip()}")
    return out


def unbacked(text: str, facts: dict, lang: str) -> list[str]:
    """Each clause that states a direction in words for a change whose recorded bounds fix none: loosen a fact's "min"
    from 1.5 to 0.5 and "slower" beside it is no longer checked, so it fails here instead."""
    out = []
    for m in FACT.finditer(text):
        spec = facts.get(m.group(1)) or {}
        metric = spec.get("metric")
        quantity = RATIOS.get(metric) or SAVINGS.get(metric) or (DIFFERENCES.get(metric) or (None,))[0]
        if quantity is None or direction(spec) is not None:
            continue
        here = FACT.sub("", clause(text, m.start(), m.end()))
        said = found(WORDS[lang][(quantity, "up")] + WORDS[lang][(quantity, "down")], here, lang)
        if said:
            out.append(
                f"{m.group(1)} ({metric}, bounds {spec.get('min')}..{spec.get('max')}) said with {said}: {here.strip()}"
            )
    return out


# What a share is a share of, per metric and language: the clause that quotes the share names its whole ("% of the
# peak", "占峰值的"), so that "of the saving" edited into "of the peak" fails against what the metric computes.
WHOLES = {
    "category_share_pct": {"en": ("peak",), "zh": ("峰值",)},
    "category_share_of_saving": {"en": ("saving", "saves", "saved"), "zh": ("省下", "节省")},
    "trainable_pct": {"en": ("parameters",), "zh": ("参数",)},
}
# What a share's category is called: the clause names it too ("activations were 48 % of the peak").
CATEGORY_WORDS = {
    "en": {
        "activations": ("activation",),
        "gradients": ("gradient",),
        "parameters": ("parameter", "weight"),
        "optimizer_state": ("optimizer state", "Adam"),
        "other": ("not a tensor", "workspace"),
    },
    "zh": {
        "activations": ("激活",),
        "gradients": ("梯度",),
        "parameters": ("参数", "权重"),
        "optimizer_state": ("优化器状态", "Adam"),
        "other": ("不是张量", "非张量", "工作区"),
    },
}


def unnamed_wholes(text: str, facts: dict, lang: str) -> list[str]:
    """Each clause of `text` that quotes a share without naming what it is a share of. A clause that carries on an
    earlier share of the same metric in its sentence ("5 % of the peak, against 2 % with ...") takes that one's whole."""
    out, named = [], {}  # metric -> the sentence start where a clause last named its whole
    text = joined_lines(text)
    for m in FACT.finditer(text):
        metric = (facts.get(m.group(1)) or {}).get("metric")
        if metric not in WHOLES:
            continue
        sentence = max((s.end() for s in SENTENCE.finditer(text, 0, m.start())), default=0)
        here = FACT.sub("", clause(text, m.start(), m.end()))
        category = facts[m.group(1)].get("category")
        words = CATEGORY_WORDS[lang].get(category, ()) if isinstance(category, str) else ()
        if found(WHOLES[metric][lang], here, lang) and (not words or mentions(words, here, lang)):
            named[metric] = sentence
        elif named.get(metric) != sentence:
            out.append(
                f"{m.group(1)} ({metric}) does not say what it is a share of, or of which category: {here.strip()}"
            )
    return out


def mentions(words: tuple[str, ...], text: str, lang: str) -> bool:
    """Whether the text says one of the words."""
    # A category's word may take an ending ("activations", "weights"): a word's start is enough in English.
    if lang == "en":
        return any(re.search(rf"\b{re.escape(w)}", text, re.IGNORECASE) for w in words)
    return any(w in text for w in words)
