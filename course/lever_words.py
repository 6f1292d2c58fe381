"""Which lever a sentence says works at a peak, checked against the recording that backs it. Torch-free.

"When the peak is in `optimizer_step`, change the optimizer, not the activations" is three claims about one
recording: its peak is in that phase, the optimizer's tensors are a real part of it, and the activations are not (they
are freed before the optimizer runs). A sentence that tells the learner to change something (en "change the ...";
zh 该改的是 ...) names the levers before its "not" (而不是 / 而非 / 不是) and rules out the ones after it. The
recording is the one a memory fact of the sentence quotes, else of the lines after it up to the next heading (the
table that backs it). At that recording's peak every lever named must hold at least SIGNIFICANT of the peak's
tensor bytes and every lever ruled out at most NEGLIGIBLE; a phase the sentence names ("when the peak is in ...") must
be the recording's peak phase. So "not the activations" edited into "and the activations", the two levers swapped,
or the phase changed, fails against the data in either language."""

from __future__ import annotations

import re

from .directions import FACT, mentions
from .only_words import NAMES as CATEGORY_NAMES
from .phase_words import NAMES as PHASE_NAMES
from .sentences import sentences

SIGNIFICANT = 0.10  # of the tensor bytes at the peak: a lever worth changing holds at least this much
NEGLIGIBLE = 0.02  # a lever ruled out holds at most this much
# The optimizer, as a lever, is the state it keeps (the update's temporaries come and go with it).
LEVERS = {
    lang: {**names, "optimizer_state": (*names["optimizer_state"], optimizer)}
    for lang, names, optimizer in (("en", CATEGORY_NAMES["en"], "optimizer"), ("zh", CATEGORY_NAMES["zh"], "优化器"))
}
# An imperative: at the sentence's start or after the comma of its "when" clause ("do not change", "which change" are
# not advice).
CHANGE = {
    "en": re.compile(r"(?:^|,\s*)change\s+(?P<body>[^.;:!?]*)", re.IGNORECASE),
    "zh": re.compile(r"该改的是(?P<body>[^。；：！？]*)"),
}
NOT = {"en": re.compile(r",?\s*\bnot\b", re.IGNORECASE), "zh": re.compile(r"[，,]?\s*(?:而不是|而非|不是)")}
HEADING = re.compile(r"\n#")


def _levers(text: str, lang: str) -> set[str]:
    return {c for c, words in LEVERS[lang].items() if mentions(words, text, lang)}


def _phase(sentence: str, lang: str) -> str | None:
    """The first phase the sentence names, in its language or by the phase's own name (`optimizer_step`)."""
    found = [
        (sentence.find(w), phase)
        for phase in PHASE_NAMES["en"]
        for w in {phase, *PHASE_NAMES[lang][phase]}
        if w in sentence
    ]
    return min(found)[1] if found else None


def claims(text: str, lang: str) -> list[dict]:
    """Each lever sentence of `text`: the levers it names and rules out, the phase it names, the facts that back it."""
    out = []
    for sentence in (s.strip() for s in sentences(text)):
        m = CHANGE[lang].search(sentence)
        if not m:
            continue
        body = m.group("body")
        cut = NOT[lang].search(body)
        named = _levers(body[: cut.start()] if cut else body, lang)
        ruled_out = _levers(body[cut.end() :], lang) if cut else set()
        if not named and not ruled_out:
            continue
        quoted = FACT.findall(sentence)
        if not quoted:  # the lines after it, up to the next heading: the table or list that backs it
            start = text.find(sentence)
            rest = text[start + len(sentence) :] if start >= 0 else ""
            end = HEADING.search(rest)
            quoted = FACT.findall(rest[: end.start()] if end else rest)
        out.append(
            {
                "named": named,
                "ruled_out": ruled_out,
                "phase": _phase(sentence[: m.start()], lang),
                "facts": quoted,
                "sentence": sentence,
            }
        )
    return out


def unbacked(text: str, facts: dict, lang: str, load) -> list[str]:
    """Each lever sentence that its recording contradicts, or that no recording backs. `load(recorded_id)`: the
    recorded result, or None."""
    out = []
    for claim in claims(text, lang):
        runs = [facts[f]["run"] for f in claim["facts"] if (facts.get(f) or {}).get("run")]
        result = load(runs[0]) if runs else None
        breakdown = (result or {}).get("breakdown")
        if not breakdown:
            out.append(f"no recording with a breakdown backs: {claim['sentence']}")
            continue
        total = sum(breakdown.values()) or 1
        share = {c: breakdown.get(c, 0) / total for c in LEVERS[lang]}
        weak = sorted(c for c in claim["named"] if share[c] < SIGNIFICANT)
        strong = sorted(c for c in claim["ruled_out"] if share[c] > NEGLIGIBLE)
        peak_phase = (result.get("peak_phase") or {}).get("phase")
        if weak or strong or (claim["phase"] and claim["phase"] != peak_phase):
            shares = {c: round(share[c], 3) for c in sorted(claim["named"] | claim["ruled_out"])}
            out.append(
                f"{runs[0]}: peak in {peak_phase}, shares {shares}; the sentence names {sorted(claim['named'])}, rules "
                f"out {sorted(claim['ruled_out'])}, phase {claim['phase']}: {claim['sentence']}"
            )
    return out
