"""Where a sentence puts the peak, in both languages: a prompt whose check says the peak is in optimizer_step may
not say "it is in backward, not in optimizer_step" (or 它在“反向”阶段 in the Chinese alone). Torch-free.

A sentence that speaks of the peak places it with "in / into <phase>" (在 / 到 / 落在 / 移到 + the phase's name) and
rules one out with "not in <phase>" (不是 / 不在 / 而非). The first phase it places the peak in must be one the check
allows, and no phase it rules out may be. A possessive ("step 1's backward", 第 1 步的“优化器更新”) names a phase
without placing the peak, and a conditional sentence ("when the peak is in backward (on a CPU)") speaks of another
run."""

from __future__ import annotations

import re

from .sentences import sentences

NAMES = {
    "en": {"optimizer_step": ("optimizer_step", "optimizer step"), "backward": ("backward",), "forward": ("forward",)},
    "zh": {"optimizer_step": ("优化器更新",), "backward": ("反向",), "forward": ("前向",)},
}
RULED_OUT = {"en": re.compile(r"\bnot (?:in |into |at )?(?:the )?$"), "zh": re.compile(r"(?:不是|不在|而非)[“\"]?$")}
PLACED = {"en": re.compile(r"(?:\bin|\binto|\(in)\s+(?:the\s+)?$"), "zh": re.compile(r"(?:在|到|落在|移到)[“\"]?$")}
PEAK = {"en": re.compile(r"\bpeak", re.IGNORECASE), "zh": re.compile("峰值")}
CONDITIONAL = {"en": re.compile(r"\b(?:when|if)\b", re.IGNORECASE), "zh": re.compile("时|如果")}


def _mentions(sentence: str, lang: str) -> list[tuple[int, str, bool]]:
    """(position, phase, ruled out) of each phase the sentence places the peak in or rules out."""
    out = []
    for phase, words in NAMES[lang].items():
        for word in words:
            pattern = rf"\b{re.escape(word)}\b" if lang == "en" else re.escape(word)
            for m in re.finditer(pattern, sentence):
                before = sentence[max(0, m.start() - 12) : m.start()]
                ruled_out = bool(RULED_OUT[lang].search(before))
                if ruled_out or PLACED[lang].search(before):
                    out.append((m.start(), phase, ruled_out))
    return sorted(out)


def misplaced_peaks(text: str, allowed: set[str], lang: str) -> list[str]:
    """Each sentence of `text` that puts the peak in a phase outside `allowed` or rules out one inside it."""
    out = []
    # A colon introduces what the sentence says of the peak ("Find the tallest peak bar: it is in ..."): no end.
    for sentence in sentences(text):
        if not PEAK[lang].search(sentence) or CONDITIONAL[lang].search(sentence):
            continue
        mentions = _mentions(sentence, lang)
        placed = [phase for _, phase, ruled_out in mentions if not ruled_out]
        if placed and placed[0] not in allowed:
            out.append(f"puts the peak in {placed[0]}, the check says {sorted(allowed)}: {sentence.strip()}")
        out += [
            f"rules out {phase}, where the check puts the peak: {sentence.strip()}"
            for _, phase, ruled_out in mentions
            if ruled_out and phase in allowed
        ]
    return out
