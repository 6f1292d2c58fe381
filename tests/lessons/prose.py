"""What the lesson tests read of a lesson's prose: every string its page can show from meta.json, and the numbers
in it that look measured (each must be a recorded {{fact}} instead)."""

from __future__ import annotations

import re


def texts(value) -> list[str]:
    if isinstance(value, dict):
        return [v for k, v in value.items() if k in ("en", "zh") and isinstance(v, str)]
    return [value] if isinstance(value, str) else []


def prose_of(meta: dict) -> list[str]:
    """Every lesson string the page can show from meta.json."""
    out = texts(meta.get("summary"))
    for prompt in (meta.get("prompts") or {}).values():
        out += texts(prompt.get("notice")) + texts(prompt.get("try"))
    for tech in meta.get("techniques") or []:
        for k in ("claim", "why_holds", "why_not"):
            out += texts(tech.get(k))
    for s in meta.get("leak_scenarios") or []:
        if isinstance(s, dict):
            out += texts(s.get("expect"))
    for f in meta.get("fragmentation") or []:
        out += texts(f.get("notice"))
    return out


# Allocator constants and exact byte counts are definitions, not measurements.
DEFINITIONS = {"512 B", "1 MiB", "2 MiB", "10 MiB", "20 MiB", "1-10 MiB", "1–10 MiB"}
MEASURED = re.compile(r"\d[\d,]*(?:\.\d+)?\s*(?:MiB|GiB|KiB|MB|GB|%|％|ms|TFLOP/s)|\d+\.\d+\s*(?:×|x\b|倍)")


def bare_numbers(text: str) -> list[str]:
    text = re.sub(r"```.*?```", " ", text, flags=re.S)
    text = re.sub(r"`[^`]*`", " ", text)
    text = re.sub(r"“[^”]*”|\"[^\"]*\"|「[^」]*」|‘[^’]*’", " ", text)
    text = re.sub(r"\{\{[^}]*\}\}", " ", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    for d in DEFINITIONS:
        text = text.replace(d, " ")
    return MEASURED.findall(text)
