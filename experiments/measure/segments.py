"""The caching allocator's segments at a run's peak: a CUDA snapshot's segments, replayed backwards through the
allocator's trace to the moment of the peak (as pytorch.org/memory_viz does), as plain data for the segment chart.
Torch-free; the raw snapshot is saved for download beside it.
"""

from __future__ import annotations

import pickle
import tempfile
import uuid
from pathlib import Path

from ..estimate.allocator_model import round_size

# Blocks kept in the segment view; adjacent blocks of the same state and category are merged beyond it.
MAX_BLOCKS = 800
SNAPSHOT_DIR = Path(tempfile.gettempdir()) / "gpu-memory-lab-snapshots"
KEEP_SNAPSHOTS = 24  # raw snapshots kept on disk for download; older ones are deleted


class ReplayError(ValueError):
    pass


def parse_segments(segments: list[dict]) -> list[dict]:
    """Snapshot segments -> [{"address", "total_bytes", "expandable", "blocks": [[address, size, state]]}]."""
    out = []
    for s in segments:
        addr = int(s["address"])
        blocks, at = [], addr
        for b in s.get("blocks") or []:
            baddr = int(b.get("address", at))
            state = "allocated" if b.get("state") in ("active_allocated", "active_pending_free") else "free"
            blocks.append([baddr, int(b["size"]), state])
            at = baddr + int(b["size"])
        out.append(
            {
                "address": addr,
                "total_bytes": int(s["total_size"]),
                "expandable": bool(s.get("is_expandable")),
                "pool": s.get("segment_type", "?"),
                "blocks": blocks,
            }
        )
    return sorted(out, key=lambda s: s["address"])


def _find(segs: list[dict], addr: int) -> dict:
    for s in segs:
        if s["address"] <= addr < s["address"] + s["total_bytes"]:
            return s
    raise ReplayError(f"no segment holds address {addr:#x}")


def _merge(seg: dict) -> None:
    merged: list[list] = []
    for b in seg["blocks"]:
        if merged and merged[-1][2] == b[2] == "free" and merged[-1][0] + merged[-1][1] == b[0]:
            merged[-1][1] += b[1]
        else:
            merged.append(list(b))
    seg["blocks"] = merged


def _set_state(segs: list[dict], addr: int, size: int, want_from: str, to: str) -> None:
    seg = _find(segs, addr)
    for i, (baddr, bsize, state) in enumerate(seg["blocks"]):
        if baddr <= addr and addr + size <= baddr + bsize and state == want_from:
            if want_from == "allocated" and (baddr != addr or bsize != size):
                raise ReplayError(f"allocated block at {addr:#x} is {bsize} B, not {size} B")
            pieces = [[baddr, addr - baddr, state], [addr, size, to], [addr + size, baddr + bsize - addr - size, state]]
            seg["blocks"][i : i + 1] = [p for p in pieces if p[1] > 0]
            _merge(seg)
            return
    raise ReplayError(f"no {want_from} block at {addr:#x} of {size} B")


def undo(segs: list[dict], e: dict) -> None:
    """Step the segment state one trace entry back in time."""
    a, addr, size = e.get("action"), e.get("addr"), round_size(int(e.get("size", 0)))
    if a == "alloc":
        _set_state(segs, addr, size, "allocated", "free")
    elif a == "free_completed":
        _set_state(segs, addr, size, "free", "allocated")
    elif a in ("segment_alloc", "segment_map"):
        seg = _find(segs, addr)
        if any(b[2] != "free" for b in seg["blocks"] if b[0] < addr + size and addr < b[0] + b[1]):
            raise ReplayError(f"segment range at {addr:#x} still holds live blocks")
        if seg["address"] == addr and seg["total_bytes"] == size:
            segs.remove(seg)
            return
        if addr + size != seg["address"] + seg["total_bytes"] and addr != seg["address"]:
            raise ReplayError("unmapping the middle of a segment")
        _set_state(segs, addr, size, "free", "gone")
        seg["blocks"] = [b for b in seg["blocks"] if b[2] != "gone"]
        seg["total_bytes"] -= size
        seg["address"] = seg["blocks"][0][0] if seg["blocks"] else seg["address"]
    elif a in ("segment_free", "segment_unmap"):
        for seg in segs:
            if a == "segment_unmap" and seg["address"] + seg["total_bytes"] == addr:
                seg["blocks"].append([addr, size, "free"])
                seg["total_bytes"] += size
                _merge(seg)
                return
            if a == "segment_unmap" and addr + size == seg["address"]:
                seg["blocks"].insert(0, [addr, size, "free"])
                seg["address"], seg["total_bytes"] = addr, seg["total_bytes"] + size
                _merge(seg)
                return
        segs.append(
            {
                "address": addr,
                "total_bytes": size,
                "expandable": a == "segment_unmap",
                "pool": "?",
                "blocks": [[addr, size, "free"]],
            }
        )
        segs.sort(key=lambda s: s["address"])


def segments_at(
    snapshot_segments: list[dict],
    trace: list[dict],
    peak_at: int | None,
    categories: dict[int, tuple[str, str | None]] | None = None,
) -> tuple[list[dict], str]:
    """The segments at the peak, replayed backwards from the snapshot's state (as memory_viz does).

    Returns (segments for a chart, "peak"), or the snapshot's own state and "end" when the trace cannot be
    replayed (entries dropped by the ring buffer, or no peak inside the trace)."""
    end = parse_segments(snapshot_segments)
    if peak_at is None:
        return view(end, categories), "end"
    segs = [dict(s, blocks=[list(b) for b in s["blocks"]]) for s in end]
    try:
        for e in reversed(trace[peak_at + 1 :]):
            undo(segs, e)
    except ReplayError:
        return view(end, categories), "end"
    return view(segs, categories), "peak"


def view(segs: list[dict], categories: dict[int, tuple[str, str | None]] | None = None) -> list[dict]:
    """Segments as plain data: blocks with offset, size, state and (allocated, where known) category and frame.
    Beyond MAX_BLOCKS blocks, neighbours with the same state and category are merged."""
    out = []
    for s in segs:
        blocks = []
        for baddr, size, state in s["blocks"]:
            cat, frame = (categories or {}).get(baddr, ("other" if state == "allocated" else None, None))
            blocks.append(
                {
                    "offset": baddr - s["address"],
                    "size": size,
                    "state": state,
                    "category": cat if state == "allocated" else None,
                    "frame": frame,
                }
            )
        out.append(
            {
                "address": s["address"],
                "total_bytes": s["total_bytes"],
                "expandable": s.get("expandable", False),
                "pool": s.get("pool", "?"),
                "blocks": blocks,
            }
        )
    if sum(len(s["blocks"]) for s in out) > MAX_BLOCKS:
        for s in out:
            merged: list[dict] = []
            for b in s["blocks"]:
                if merged and (merged[-1]["state"], merged[-1]["category"]) == (b["state"], b["category"]):
                    merged[-1]["size"] += b["size"]
                    merged[-1]["frame"] = None
                    merged[-1]["merged"] = merged[-1].get("merged", 1) + 1
                else:
                    merged.append(dict(b))
            s["blocks"] = merged
    return out


def save_snapshot(snapshot: dict) -> dict:
    """The raw snapshot, pickled with protocol 4 (pytorch.org/memory_viz cannot read protocol 5), for download."""
    SNAPSHOT_DIR.mkdir(parents=True, exist_ok=True)
    path = SNAPSHOT_DIR / f"{uuid.uuid4().hex}.pickle"
    with open(path, "wb") as f:
        pickle.dump(snapshot, f, protocol=4)
    old = sorted(SNAPSHOT_DIR.glob("*.pickle"), key=lambda p: p.stat().st_mtime)[:-KEEP_SNAPSHOTS]
    for p in old:
        p.unlink(missing_ok=True)
    return {"path": str(path), "bytes": path.stat().st_size}
