"""Which two setups a quoted comparison is about, in both languages. Torch-free.

A ratio, a saving or an extra is recorded between two setups ("TF32 took {{t}}× as long as AMP": the rounds' tf32
over amp_bf16). The clause that quotes it may name either setup, or neither, never a third one: "{{t}}× as long as
fp32" edited from "as long as AMP" names a setup the figure is not about. For a ratio, a clause that names both names
its numerator first ("AMP took {{t}}× as long as TF32", the two swapped, fails). A lesson's meta.json lists how its
prose names each setup ("setups": {"amp_bf16": {"en": ["AMP"], "zh": ["AMP", "混合精度"]}}); a fact's two sides are
its strategy and versus, its estimate (or H200 run) and versus, or its run and baseline.
tests/lessons/test_ratio_sides.py holds every lesson's prose to it."""

from __future__ import annotations

import re

from .directions import DIFFERENCES, FACT, RATIOS, SAVINGS
from .sentences import clause

TWO_SIDED = set(RATIOS) | set(SAVINGS) | set(DIFFERENCES)


def sides(spec: dict) -> tuple[str, str] | None:
    """The fact's two setups (numerator or subject first), or None where it names no two."""
    if spec.get("metric") not in TWO_SIDED:
        return None
    for first, second in (("strategy", "versus"), ("estimate", "versus"), ("h200", "versus"), ("run", "baseline")):
        if spec.get(first) and spec.get(second):
            return spec[first], spec[second]
    return None


def _names(setups: dict, lang: str) -> list[tuple[str, frozenset]]:
    """Every name of a setup in `lang`, longest first (a longer name wins where it holds a shorter one: "strict fp32"
    is not "fp32"), with the setups it may name."""
    by_word: dict[str, set] = {}
    for sid, words in setups.items():
        for w in words.get(lang, []):
            by_word.setdefault(w, set()).add(sid)
    return sorted(((w, frozenset(s)) for w, s in by_word.items()), key=lambda x: -len(x[0]))


def named(here: str, setups: dict, lang: str) -> list[tuple[int, frozenset]]:
    """(position, setups) of each setup name in `here`, in order; each stretch of text counts for one name."""
    out, text = [], here
    for word, ids in _names(setups, lang):
        # English names are whole words in any case; Chinese ones are substrings.
        pattern = (
            re.compile(rf"(?<![\w-]){re.escape(word)}(?![\w-])", re.I) if lang == "en" else re.compile(re.escape(word))
        )
        out += [(m.start(), ids) for m in pattern.finditer(text)]
        text = pattern.sub(lambda m: " " * len(m.group(0)), text)
    return sorted(out, key=lambda x: x[0])


def misnamed(text: str, facts: dict, setups: dict, lang: str) -> list[str]:
    """Each clause of `text` that quotes a two-sided fact beside a setup it is not about, or a ratio's sides swapped."""
    out = []
    for m in FACT.finditer(text):
        spec = facts.get(m.group(1)) or {}
        pair = sides(spec)
        if pair is None or not set(pair) <= setups.keys():  # a comparison the lesson names no setups of
            continue
        here = FACT.sub(lambda f: " " * len(f.group(0)), clause(text, m.start(), m.end()))
        found = named(here, setups, lang)
        flat = " ".join(here.split())
        third = [ids for _, ids in found if not ids & set(pair)]
        if third:
            out.append(f"{m.group(1)} compares {pair[0]} with {pair[1]}; the clause names {sorted(third[0])}: {flat}")
        if spec.get("metric") in RATIOS:
            first = [at for at, ids in found if pair[0] in ids and pair[1] not in ids]
            second = [at for at, ids in found if pair[1] in ids and pair[0] not in ids]
            if first and second and min(first) > min(second):
                out.append(f"{m.group(1)} is {pair[0]} over {pair[1]}; the clause names them the other way: {flat}")
    return out
