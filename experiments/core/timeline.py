"""A run's allocation timeline as data (`result["history"]`, experiments/measure/history.py records it): its running
totals and peak, coalesced to a size a page can chart, the series a chart draws, and which blocks are live at the
peak. Torch-free: the app reads recorded timelines without importing torch.
"""

from __future__ import annotations

import math
from collections import defaultdict

# Events kept in the result; a larger run is coalesced (see coalesce) so a page can chart it.
MAX_EVENTS = 1_500


def build(events: list[dict], phases: list[dict], start_bytes: int, source: str) -> dict:
    """Running totals, the peak and the final level; coalesced to MAX_EVENTS events when larger."""
    run = peak = start_bytes
    peak_seq = None
    for e in events:
        run += e["bytes"]
        if run > peak:
            peak, peak_seq = run, e["seq"]
    kept, coalesced = coalesce(events, MAX_EVENTS)
    return {
        "source": source,
        "start_bytes": start_bytes,
        "events": kept,
        "phases": phases,
        "peak_bytes": peak,
        "peak_seq": peak_seq,
        "final_bytes": run,
        "raw_events": len(events),
        "coalesced": coalesced,
        "truncated": False,
    }


def coalesce(events: list[dict], max_events: int) -> tuple[list[dict], bool]:
    """At most about max_events events with the same peak and the same final level.

    Consecutive events of one phase are squashed in windows; each window becomes at most two events: up to the
    highest level inside the window, then down to where the window ends. So the running total still reaches
    every window's maximum (the run's peak included) and ends where it ended; `parts` keeps the categories.
    """
    if len(events) <= max_events:
        return events, False
    per = math.ceil(len(events) / max(1, max_events // 2))
    out: list[dict] = []
    i = 0
    while i < len(events):
        j = i + 1
        while j < len(events) and j - i < per and events[j]["phase"] == events[i]["phase"]:
            j += 1
        out.extend(_squash(events[i:j]))
        i = j
    return out, True


def _squash(chunk: list[dict]) -> list[dict]:
    if len(chunk) <= 2:
        return chunk
    run, best, best_k = 0, 0, -1
    parts: dict[str, int] = defaultdict(int)
    best_parts: dict[str, int] = {}
    for k, e in enumerate(chunk):
        run += e["bytes"]
        for cat, b in (e.get("parts") or {e["category"]: e["bytes"]}).items():
            parts[cat] += b
        if run > best:
            best, best_k, best_parts = run, k, dict(parts)
    out = []

    def event(seq, nbytes, cat_bytes, members):
        cat_bytes = {c: b for c, b in cat_bytes.items() if b}
        largest = max(members, key=lambda e: abs(e["bytes"]), default=chunk[0])
        main = max(cat_bytes, key=lambda c: abs(cat_bytes[c])) if cat_bytes else largest["category"]
        return {
            "seq": seq,
            "t_ms": chunk[0].get("t_ms"),
            "bytes": nbytes,
            "category": main,
            "phase": chunk[0]["phase"],
            "frame": largest.get("frame"),
            "addr": None,
            "n": sum(e.get("n", 1) for e in members),
            "parts": cat_bytes,
        }

    if best_k >= 0:
        out.append(event(chunk[best_k]["seq"], best, best_parts, chunk[: best_k + 1]))
    rest = {c: parts[c] - best_parts.get(c, 0) for c in parts}
    if best_k < len(chunk) - 1:
        out.append(event(chunk[-1]["seq"], run - best, rest, chunk[best_k + 1 :]))
    return out


def series(history: dict) -> list[dict]:
    """Live bytes per category after every event: [{"seq", "phase", "total", <category>: bytes}] (for a chart)."""
    live: dict[str, int] = defaultdict(int)
    live["baseline"] = history.get("start_bytes", 0)
    rows = []
    for e in history.get("events") or []:
        for cat, b in (e.get("parts") or {e["category"]: e["bytes"]}).items():
            if cat != "oom":
                live[cat] += b
        rows.append({"seq": e["seq"], "phase": e["phase"], "total": sum(live.values()), **live})
    return rows


def live_categories(events: list[dict], history: dict) -> dict[int, tuple[str, str | None]]:
    """Address -> (category, frame) of the blocks alive at the peak, from the raw (not coalesced) events."""
    if history.get("peak_seq") is None:
        return {}
    live: dict[int, tuple[str, str | None]] = {}
    for e in events:
        if e["addr"] is None:
            continue
        if e["bytes"] > 0:
            live[e["addr"]] = (e["category"], e["frame"])
        else:
            live.pop(e["addr"], None)
        if e["seq"] == history["peak_seq"]:
            break
    return live


def shrink(history: dict, max_events: int) -> dict:
    """The same timeline in at most about max_events events (peak and final level unchanged): for recordings."""
    events, coalesced = coalesce(history.get("events") or [], max_events)
    return {**history, "events": events, "coalesced": history.get("coalesced", False) or coalesced}
