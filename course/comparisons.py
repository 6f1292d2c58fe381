"""Sentences that compare a quoted fact with another figure, in both languages. Torch-free.

"With 4 micro-batches the peak falls by {{accum_saving}} %, far less than the batch does" compares two recorded
savings; "fused instead of foreach saves {{impl_over_ckpt}} times what checkpointing does" says which lever saves
more. Neither is a direction of the fact alone (course/directions.py), so a fact that a sentence compares says how:

    "than": {"number": 75, "is": "less"}   its value is less (or "more") than that number (a figure of the
        configuration: 4 micro-batches shrink the batch each step works on by 75 %) or than another fact's ("fact"), and
        a sentence that quotes it with a comparative ("less than", 小于 ...) uses that side's;
    "order": {"en": [["fused", "optimizer implementation"], ["checkpoint"]], "zh": [...]}   the clause that quotes it
        names its setup (any of the first words) before the one it is compared with (any of the second):
        "checkpointing saves {{x}} times what fused does" fails.

tests/lessons/test_comparisons.py holds every lesson's prose and data to them."""

from __future__ import annotations

import re

from .directions import FACT
from .sentences import clause, sentences

COMPARATIVES = {
    "en": {
        "less": re.compile(r"\b(?:less|smaller|lower|fewer|below|faster|shorter)\s+than\b", re.IGNORECASE),
        "more": re.compile(r"\b(?:more|larger|bigger|higher|greater|above|slower|longer)\s+than\b", re.IGNORECASE),
    },
    "zh": {
        "less": re.compile(r"小于|少于|低于|不到|不如|比[^，。；：]{0,12}?[都还更]?[少小低](?!于)"),
        "more": re.compile(r"大于|多于|高于|超过|比[^，。；：]{0,12}?[都还更]?[多大高](?!于)"),
    },
}
OTHER = {"less": "more", "more": "less"}


def _first(words: list[str], text: str) -> int | None:
    at = [text.find(w) for w in words if w in text]
    return min(at) if at else None


def wrong_comparisons(text: str, facts: dict, lang: str) -> list[str]:
    """Each sentence quoting a fact whose comparison ("than", "order") its words contradict."""
    out = []
    for sentence in sentences(text):
        flat = " ".join(sentence.split())
        for m in FACT.finditer(sentence):
            spec = facts.get(m.group(1)) or {}
            than, order = spec.get("than"), (spec.get("order") or {}).get(lang)
            if than:
                side = than["is"]
                said = {k for k, p in COMPARATIVES[lang].items() if p.search(sentence)}
                if OTHER[side] in said and side not in said:
                    whom = than.get("fact", than.get("number"))
                    out.append(f"{m.group(1)} is {side} than {whom}, the sentence says {OTHER[side]}: {flat}")
            if order:
                here = clause(sentence, m.start(), m.end()).lower()
                first, second = _first(order[0], here), _first(order[1], here)
                if first is None or second is None or first > second:
                    out.append(f"{m.group(1)} compares {order[0]} with {order[1]}, in this order: {flat}")
    return out


def stated(text: str, facts: dict, lang: str) -> set[str]:
    """The facts with a "than" that a sentence of `text` states in its side's words."""
    out = set()
    for sentence in sentences(text):
        for name in FACT.findall(sentence):
            than = (facts.get(name) or {}).get("than")
            if than and COMPARATIVES[lang][than["is"]].search(sentence):
                out.add(name)
    return out


def false_comparisons(facts: dict, values: dict) -> list[str]:
    """Each "than" the data does not bear out; `values` maps a fact to its number (None: not recorded)."""
    out = []
    for name, spec in facts.items():
        than = spec.get("than")
        if not than:
            continue
        a, b = values.get(name), than["number"] if "number" in than else values.get(than.get("fact"))
        if a is None or b is None or not (a < b if than["is"] == "less" else a > b):
            out.append(f"{name} ({a}) is not {than['is']} than {than.get('fact', b)} ({b})")
    return out
