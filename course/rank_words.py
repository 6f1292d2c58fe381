"""What a sentence says about ranks, checked against the facts it quotes. Torch-free.

"ZeRO-1 keeps half of Adam's state per rank" is a relation over ranks: it holds only if it holds on every rank. A
sentence that says "per rank" (en) or 每个 rank / 每卡 / 每张卡 / 逐卡 (zh) and quotes facts is held to facts read on every
rank of their data-parallel recording (tests/lessons/test_multigpu_data.py checks each rank's value against the
quoted one); a fact read off one rank ("rank": k) is quoted only in a sentence that names that rank ("rank 0", 或
"rank 0 的"), never under "per rank". tests/lessons/test_rank_words.py holds every lesson to it in both languages."""

from __future__ import annotations

import re

from .directions import FACT
from .sentences import sentences

PER_RANK = {
    # Not a LoRA adapter's rank ("every rank-16 adapter").
    "en": re.compile(r"\b(?:per[- ]rank|each rank|every rank)\b(?![-\s]*\d)", re.IGNORECASE),
    "zh": re.compile(r"每个\s*rank|每一个\s*rank|每卡|每张卡|逐卡|逐\s*rank"),
}


def names_rank(text: str, k: int) -> bool:
    return re.search(rf"\brank\s*{k}\b", text, re.IGNORECASE) is not None


def findings(text: str, facts: dict, lang: str, ranked) -> list[str]:
    """What the text's sentences say about ranks that their quoted facts do not back. `ranked(spec)`: whether the fact's
    recording has ranks (a data-parallel run)."""
    out = []
    for sentence in sentences(text):
        quoted = [name for name in FACT.findall(sentence) if name in facts]
        per_rank = PER_RANK[lang].search(sentence) is not None
        for name in quoted:
            spec = facts[name]
            one = spec.get("rank")
            if one is not None and not names_rank(sentence, one):
                out.append(f"{name} is rank {one}'s figure, but the sentence does not say so: {sentence.strip()[:160]}")
            elif one is not None and per_rank:
                out.append(f"{name} is rank {one}'s figure, quoted per rank: {sentence.strip()[:160]}")
            elif per_rank and not ranked(spec):
                out.append(f"{name} is not read on ranks, quoted per rank: {sentence.strip()[:160]}")
    return out
