"""What a sentence says a saving is "only" made of, checked against the two recordings the saving is computed from.

"Accumulation lowers the peak by 21 %, only the activations of the missing micro-batches" is a relation: of the
tensor categories alive at the two peaks, the ones that fell are the ones the sentence names. A sentence that quotes
a saving between two recorded runs (a fact with a run and a baseline, a memory metric of course/directions.py) and
says "only <categories>" (en) or 只是 / 只有 / 仅 <categories> (zh) names every category whose bytes at the peak fell
by more than NEGLIGIBLE of the net saving; a category that grew (accumulation's full-size gradients) is not a saving
and need not be named. tests/lessons/test_only_words.py holds every lesson's prose to it in both languages, so that
"only the activations" edited into "only the gradients", or a category the saving also holds left out, fails against
the data. Torch-free."""

from __future__ import annotations

import re

from experiments.core import metrics

from .directions import DIFFERENCES, FACT, SAVINGS, mentions
from .sentences import sentences

NEGLIGIBLE = 0.02  # of the net saving: a category that fell by less need not be named
# What each category of the tracker (experiments/core/vocabulary.py) is called; English matches a word's start.
NAMES = {
    "en": {
        "activations": ("activation",),
        "gradients": ("gradient",),
        "parameters": ("parameter", "weights"),
        "optimizer_state": ("optimizer state", "Adam state", "Adam's state"),
        "temporaries": ("temporar",),
        "autocast_copies": ("autocast cop", "weight cop"),
        "data": ("data", "batch itself"),
        "other": ("scratch", "workspace", "not a tensor"),
    },
    "zh": {
        "activations": ("激活",),
        "gradients": ("梯度",),
        "parameters": ("参数", "权重"),
        "optimizer_state": ("优化器状态", "Adam 状态"),
        "temporaries": ("临时张量",),
        "autocast_copies": ("副本",),
        "data": ("数据",),
        "other": ("工作区", "不是张量", "非张量"),
    },
}
# Not "CPU-only", and not an "only" that qualifies a number ("only {{x}} GiB below"): that is a size, not a relation.
ONLY = {
    "en": re.compile(r"(?<![-\w])only\b(?!\s*(?:\{\{|\d))", re.IGNORECASE),
    "zh": re.compile(r"(?:只是|只有|仅)(?!\s*(?:\{\{|\d))"),
}
# An "only" names what follows it up to a turn to an aside or another statement; commas do not end it ("only the
# activations, with their temporaries").
SCOPE_END = re.compile(r"[;:(（；：。]|\n\s*\n")


def named(text: str, lang: str) -> set[str]:
    """The categories a phrase names."""
    return {category for category, words in NAMES[lang].items() if mentions(words, text, lang)}


def claims(text: str, lang: str) -> list[tuple[list[str], set[str], str]]:
    """(the facts its sentence quotes, the categories the "only" names, the sentence) for each "only" that names a
    tensor category in a sentence quoting a fact."""
    out = []
    for sentence in sentences(text):
        quoted = FACT.findall(sentence)
        for m in ONLY[lang].finditer(sentence):
            stop = SCOPE_END.search(sentence, m.end())
            categories = named(sentence[m.end() : stop.start() if stop else len(sentence)], lang)
            if quoted and categories:
                out.append((quoted, categories, sentence.strip()))
    return out


def fallen(result: dict, baseline: dict) -> dict[str, int] | None:
    """Bytes each category fell by from the baseline's peak to the run's (negative: grew); None without breakdowns."""
    a, b = result.get("breakdown"), baseline.get("breakdown")
    if not a or not b:
        return None
    return {c: int(b.get(c, 0)) - int(a.get(c, 0)) for c in sorted(set(a) | set(b))}


def unnamed(text: str, facts: dict, lang: str, load) -> list[str]:
    """Each "only" whose saving, in the recordings of a memory fact its sentence quotes, also fell in a category it does
    not name (or did not fall at all). `load(recorded_id)`: the recorded result, or None."""
    out = []
    for quoted, categories, sentence in claims(text, lang):
        for name in quoted:
            spec = facts.get(name) or {}
            if spec.get("metric") not in SAVINGS | DIFFERENCES or not spec.get("baseline"):
                continue
            result, baseline = load(spec.get("run")), load(spec.get("baseline"))
            drops = fallen(result, baseline) if result and baseline else None
            if drops is None:
                out.append(f"{name}: no breakdown recorded to back 'only' in: {sentence}")
                continue
            net = metrics.net_peak(baseline) - metrics.net_peak(result)
            missing = sorted(c for c, n in drops.items() if n > NEGLIGIBLE * abs(net) and c not in categories)
            if net <= 0 or missing or not any(drops.get(c, 0) > 0 for c in categories):
                out.append(
                    f"{name}: the saving ({net} bytes) fell in {drops}; 'only' names {sorted(categories)}: {sentence}"
                )
    return out
