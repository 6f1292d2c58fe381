"""Arithmetic a lesson writes out beside a figure: "8 bytes (2 + 2 + 2 × 2)", "4 (parameter) + 4 (gradient) + 8
(Adam) = 16 bytes". The sum must give the figure it stands beside, as rendered on the page, so that an edited term
(in one language alone) fails instead of teaching a wrong sum. Torch-free."""

from __future__ import annotations

import ast
import operator
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


# A sum written as code, then what it equals, each with an optional unit: "`20 × (2048 × 2048 + 2048)` = 83,927,040",
# "`20 × 2048 × 4` bytes = `160 KiB`". Grouping commas in the figure are read away.
CODE_EQUALS = re.compile(
    r"`([\d\s+×*/().,]*[+×*/][\d\s+×*/().,]*)`\s*(bytes|字节)?\s*=\s*`?(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)\s*"
    r"(KiB|MiB|GiB|bytes|字节)?`?"
)
BYTES = {None: 1, "bytes": 1, "字节": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def code_value(expr: str) -> float | None:
    """A code sum's value (numbers, + - × * / and parentheses), or None for anything else."""

    def walk(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return float(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in OPS:
            return OPS[type(node.op)](walk(node.left), walk(node.right))
        raise ValueError(node)

    try:
        return walk(ast.parse(expr.replace("×", "*").replace(",", ""), mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError):
        return None


def wrong_code_sums(text: str) -> list[str]:
    """Each sum written as code whose value is not the figure it is said to equal (in the figure's unit)."""
    out = []
    for m in CODE_EQUALS.finditer(text):
        total, figure = code_value(m[1]), m[3].replace(",", "")
        if total is None:
            continue
        scale = BYTES[m[4]] / BYTES[m[2]] if m[2] and m[4] else 1
        if not _agrees(figure, total / scale):
            out.append(f"{m[1]} is {total / scale:g}, not {m[3]}: {m[0]}")
    return out


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
    ] + wrong_code_sums(text)
