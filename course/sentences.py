"""How the lesson checks read Markdown prose: its sentences, a sentence's statements and a quoted figure's clause.
One reader for every check (course/directions.py, comparisons.py, only_words.py, quote_words.py, phase_words.py), so
that a sentence ends in the same place for all of them. Torch-free."""

from __future__ import annotations

import re

# A sentence ends at its punctuation (a full stop before a space, not a decimal point), a paragraph or a list item; a
# Markdown line break inside a paragraph is no end.
SENTENCE = re.compile(r"[.!?](?=\s)|[;。；！？]|\n\s*\n|\n\s*[-*] ")
# A sentence's statements: its end, or a word that turns to another statement.
STATEMENT = re.compile(rf"{SENTENCE.pattern}|\b(?:but|while|whereas)\b|却|而|但")
# Where a clause ends: a sentence's punctuation, a comma ("fell by 950 MiB, more than Adam's two states": the second
# part compares sizes, it states no direction), and a word that turns to another statement ("saves 20 MiB of
# activations but adds weight copies").
BOUNDARY = re.compile(r"[.;:!?。；：！？\n|,，]|\b(?:but|while|whereas)\b|却|而|但")
# A bold label that leads its clause ("**slower**: about {{t}}×", "**更慢**：耗时约是 {{t}} 倍"): it states the clause's
# direction, so the colon after it is no boundary.
LABEL = re.compile(r"\*\*[^*\n]{1,24}\*\*\s*[:：]\s*$")
# A table's cells are statements of their own.
CELL = re.compile(rf"{SENTENCE.pattern}|\|")


def joined_lines(text: str) -> str:
    """The text with each Markdown line break inside a paragraph made a space (a paragraph or a list item still ends
    its sentence)."""
    return re.sub(r"(?<!\n)\n(?!\s*\n|\s*[-*] )", " ", text)


def sentences(text: str, ends: re.Pattern = SENTENCE) -> list[str]:
    """The text's sentences in order, each with the mark that ends it (`ends`: where one ends)."""
    text = joined_lines(text)
    cuts = [0, *(m.end() for m in ends.finditer(text)), len(text)]
    return [text[a:b] for a, b in zip(cuts, cuts[1:], strict=False)]


def sentence_of(text: str, at: int) -> str:
    """The statement around text[at]: from the last sentence end (or turn) before it to the next one."""
    a = max((m.end() for m in STATEMENT.finditer(text, 0, at)), default=0)
    after = STATEMENT.search(text, at)
    return text[a : after.start() if after else len(text)]


def clause(text: str, start: int, end: int) -> str:
    """The clause around text[start:end]: from the last boundary before it to the next one after it."""
    a = max((m.end() for m in BOUNDARY.finditer(text, 0, start)), default=0)
    label = LABEL.search(text, 0, a)
    if label:
        a = max((m.end() for m in BOUNDARY.finditer(text, 0, label.start())), default=0)
    after = BOUNDARY.search(text, end)
    return text[a : after.start() if after else len(text)]
