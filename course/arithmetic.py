"""Arithmetic a lesson writes out beside a figure: "8 bytes (2 + 2 + 2 × 2)", "4 (parameter) + 4 (gradient) + 8
(Adam) = 16 bytes". The sum must give the figure it stands beside, as rendered on the page, so that an edited term
(in one language alone) fails instead of teaching a wrong sum. Torch-free."""

from __future__ import annotations

import re

NUMBER = r"\d+(?:\.\d+)?"
EXPR = rf"{NUMBER}(?:\s*[+×*/]\s*{NUMBER})+"
# A parenthesised label without a digit ("(parameter)", "（梯度）"): it names a term and takes no part in the sum.
LABEL = re.compile(r"\s*[(（][^()（）\d]*[)）]")
# A figure (not the end of a name such as fp32), at most a short unit after it, then its own sum in parentheses; not a
# product ("10 × (1000 × 1000 + 1000)").
BESIDE = re.compile(rf"(?<![\w.])({NUMBER})(?!\s*[x×*]\s*[(（])\s*[^\d\s()（）+=]{{0,8}}?\s*[(（]\s*({EXPR})\s*[)）]")
# A sum, then what it equals.
EQUALS = re.compile(rf"({EXPR})\s*(?:=|同样是|等于)\s*({NUMBER})")


def value(expr: str) -> float:
    """The sum's value, × and * as multiplication, by the usual precedence (the pattern admits digits and + × * /)."""
    terms = []
    for term in re.split(r"\s*\+\s*", expr.strip()):
        parts = re.split(r"\s*([×*/])\s*", term)
        x = float(parts[0])
        for op, y in zip(parts[1::2], parts[2::2], strict=True):
            x = x * float(y) if op in "×*" else x / float(y)
        terms.append(x)
    return sum(terms)


def _agrees(figure: str, total: float) -> bool:
    # The figure is rounded to its own decimals on the page.
    decimals = len(figure.partition(".")[2])
    return abs(float(figure) - total) <= 0.5 * 10**-decimals + 1e-9


def sums(text: str) -> list[tuple[str, str, str]]:
    """(figure, sum, the words they stand in) for each written-out sum in rendered `text`."""
    plain = LABEL.sub("", text.replace("**", ""))
    beside = [(m[1], m[2], m[0]) for m in BESIDE.finditer(plain)]
    return beside + [(m[2], m[1], m[0]) for m in EQUALS.finditer(plain)]


def wrong_sums(text: str) -> list[str]:
    """Each written-out sum in rendered `text` that does not give the figure beside it."""
    return [
        f"{expr} is {value(expr):g}, not {figure}: {words}"
        for figure, expr, words in sums(text)
        if not _agrees(figure, value(expr))
    ]
