"""The configuration a sentence states in numbers ("20 layers", "batch 32", "4 micro-batches", "8 key/value heads"),
in both languages. Torch-free.

Such a number is not a measurement (course/facts.py quotes those) but a claim about which configuration was measured:
each must be a value that field has in one of the course's recorded configurations (a lesson quotes another's), its
presets or its quoted estimates, so that "batch 32" edited into "batch 24" (or only the Chinese "20 层" into "24 层")
fails against the recordings. A sentence that quotes a measured fact is held closer: a number it states for a field
that the fact's own runs set must be one of their values ("at batch 32, fused=True cut the peak by {{saving}} %"
edited into "batch 64" fails, although another lesson recorded batch 64). tests/lessons/test_config_words.py holds
every lesson's prose to both."""

from __future__ import annotations

import re
from collections.abc import Callable

from .directions import FACT
from .sentences import sentences

NUMBER = r"(\d[\d,]*)"
# field -> its patterns per language; each pattern's first group is the number.
PATTERNS = {
    "batch": {
        "en": (rf"\bbatch(?: size)? {NUMBER}\b", rf"\bbatches of {NUMBER}\b"),
        "zh": (rf"\bbatch ?{NUMBER}", rf"批大小 ?{NUMBER}"),
    },
    # A list of depths ("the 3-, 4- and 5-layer replays", "3、4、5 层重放") is the engine's, not a configuration.
    "layers": {"en": (rf"\b{NUMBER} layers\b",), "zh": (rf"(?<![\d.、]){NUMBER} ?层",)},
    "width": {"en": (rf"\bwidth {NUMBER}\b",), "zh": (rf"宽度 ?{NUMBER}",)},
    "heads": {"en": (rf"\b{NUMBER} (?:query |attention )?heads\b",), "zh": (rf"{NUMBER} ?个(?:查询|注意力)?头",)},
    "kv_heads": {"en": (rf"\b{NUMBER} key/value heads\b",), "zh": (rf"{NUMBER} ?个键/?值头",)},
    "seq_len": {
        "en": (rf"\bsequence length {NUMBER}\b", rf"\bseq(?:uence)? {NUMBER}\b", rf"\b{NUMBER} tokens\b"),
        "zh": (rf"序列长度 ?{NUMBER}", rf"{NUMBER} ?个 ?token"),
    },
    "accum": {"en": (rf"\b{NUMBER} micro-batches\b",), "zh": (rf"{NUMBER} ?个(?:大小为 ?\d+ ?的)?微批次",)},
    "lora_rank": {"en": (rf"\brank {NUMBER} on\b", rf"\bLoRA rank {NUMBER}\b"), "zh": (rf"秩(?:为)? ?{NUMBER}",)},
}
# Code, quotations and {{facts}} state no configuration of the lesson's own.
UNSTATED = re.compile(r"```.*?```|`[^`]*`|\{\{[^}]*\}\}|“[^”]*”|\"[^\"]*\"", re.S)


def stated(text: str, lang: str) -> list[tuple[str, int, str]]:
    """(field, value, the words) for each configuration number the text states."""
    text = UNSTATED.sub(" ", " ".join(text.split()))
    out = []
    for field, by_lang in PATTERNS.items():
        for pattern in by_lang[lang]:
            for m in re.finditer(pattern, text):
                out.append((field, int(m.group(1).replace(",", "")), m.group(0)))
    return out


def unbacked(text: str, lang: str, values: dict[str, set[int]]) -> list[str]:
    """Each configuration number of `text` that no recorded configuration has for that field (`values`)."""
    return [
        f"{words!r}: {field} {value} is in no recorded configuration (has {sorted(values.get(field, ()))[:12]})"
        for field, value, words in stated(text, lang)
        if value not in values.get(field, set())
    ]


def unmatched(text: str, lang: str, facts: dict, values_of: Callable[[str], dict[str, set[int]] | None]) -> list[str]:
    """Each configuration number of a sentence quoting facts that the facts' recorded runs do not have, where they set
    that field. `values_of(name)`: the values of each field in a recording (a job's configuration, a rounds set's
    strategies), None for a name that is not one; a fact names its runs by any of its values."""
    out = []
    for sentence in sentences(text):
        values: dict[str, set[int]] = {}
        for name in FACT.findall(sentence):
            for ref in (facts.get(name) or {}).values():
                for field, vs in ((isinstance(ref, str) and values_of(ref)) or {}).items():
                    values.setdefault(field, set()).update(vs)
        out += [
            f"{words!r}: the runs of {FACT.findall(sentence)} have {field} {sorted(values[field])}, not {value}"
            for field, value, words in stated(sentence, lang)
            if field in values and value not in values[field]
        ]
    return out
