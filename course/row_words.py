"""Which profiler row a quoted figure belongs to, checked against the row its fact reads.

"`Optimizer.step`'s *total* is {{ana_step_total_mib}} MiB ... Its *self* memory is {{ana_step_self_mib}} MiB" says both
figures are that row's. The row a figure belongs to is the last row named in a code span before it, in the same
paragraph or list item; a code span that names no row of the recorded table (`foreach`) is not one. A figure whose
fact reads a row (meta.json "row") must follow its own row's name, so that "`Optimizer.zero_grad`" edited in, or the
figure moved under another row, fails against the data. tests/lessons/test_row_words.py holds every lesson to it, in
both languages. Torch-free."""

from __future__ import annotations

import re

BLOCK = re.compile(r"\n\s*\n|\n(?=\s*[-*] )")  # a paragraph or a list item
TOKEN = re.compile(r"`([^`\n]+)`|\{\{\s*([\w-]+)(?:\.\w+)?\s*\}\}")


def named_rows(text: str, is_row) -> list[tuple[str, str | None]]:
    """(fact, the row named last before it in its block, or None) for every {{fact}} of the text, in order;
    `is_row(span)` says whether a code span names a row of the recorded table."""
    out = []
    for block in BLOCK.split(text):
        row = None
        for m in TOKEN.finditer(block):
            span, fact = m.groups()
            if span is not None:
                row = span if is_row(span) else row
            else:
                out.append((fact, row))
    return out


def misattributed(text: str, facts: dict, row_names) -> list[str]:
    """Each figure of a fact that reads a profiler row but follows another row's name (or none): "fact: row named X,
    the fact reads Y"."""
    names = list(row_names)

    def is_row(span: str) -> bool:
        return any(name.startswith(span) for name in names)

    found = []
    for fact, named in named_rows(text, is_row):
        wanted = (facts.get(fact) or {}).get("row")
        if wanted is not None and named != wanted:
            found.append(f"{fact}: the prose names the row {named!r}, the fact reads {wanted!r}")
    return found
