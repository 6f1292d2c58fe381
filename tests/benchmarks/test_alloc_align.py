"""benchmarks/alloc_align.py: the CUDA estimate's trace of a small model, labelled by op, aligned with a real history
made from it; an allocation the real run has and the replay does not is the one stretch reported."""

from __future__ import annotations

import gzip
import json

from benchmarks import alloc_align

CONFIG = json.dumps({"model": "mlp", "layers": 2, "width": 64, "batch": 8, "precision": "fp32"})


def _as_real(events: list, extra_after: int | None = None) -> list:
    """The replay's events as an allocator history would list them (addresses for keys, 512-byte blocks)."""
    out = []
    for i, (kind, key, n, _op, _tag) in enumerate(events):
        if kind == "alloc":
            out.append(["alloc", -(-n // 512) * 512, 4096 * key, ["model.py:1 forward"]])
        elif kind == "free":
            out.append(["free_completed", 0, 4096 * key, []])
        if i == extra_after:
            out.append(["alloc", 1 << 20, 7, ["kernel.py:9 workspace"]])
    return out


def test_the_same_run_aligns_and_an_extra_allocation_is_named(tmp_path):
    replayed = tmp_path / "replay.json.gz"
    alloc_align.replay(CONFIG, str(replayed))
    with gzip.open(replayed, "rt") as f:
        events = json.load(f)["events"]
    assert any(e[0] == "alloc" and e[3].startswith("aten.") for e in events)  # each allocation names its op
    same, extra = tmp_path / "same.json.gz", tmp_path / "extra.json.gz"
    first_alloc = next(i for i, e in enumerate(events) if e[0] == "alloc")
    for path, after in ((same, None), (extra, first_alloc)):
        with gzip.open(path, "wt") as f:
            json.dump({"events": _as_real(events, after)}, f)
    assert len(alloc_align.align(str(same), str(replayed), least=1)) == 1  # the count line only
    lines = alloc_align.align(str(extra), str(replayed), least=1)
    assert lines[1].startswith("--- delete") and "1,048,576" in lines[2] and "workspace" in lines[2]
