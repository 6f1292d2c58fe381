"""The allocation timeline and the census on a CUDA device (skipped without one).

python3 -m pytest -q -s tests/gpu/test_history_gpu.py
"""

import gzip
import pickle

import pytest
import torch

from experiments.core import timeline
from experiments.core.config import ExperimentConfig
from experiments.labs.fragmentation import run_fragmentation
from experiments.labs.leaks import run_leak
from experiments.measure.run import run_experiment
from tests.gpu.gpu_lock import one_gpu_user  # noqa: F401 - the fixture the marks use

pytestmark = [
    pytest.mark.usefixtures("one_gpu_user"),
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

LAYERS, WIDTH = 8, 1024


def _round(n):
    return -(-n // 512) * 512


@pytest.fixture(scope="module")
def preset():
    cfg = ExperimentConfig(
        model="mlp", layers=LAYERS, width=WIDTH, batch=256, optimizer="adam", steps=3, timing_steps=0, device="cuda"
    )
    return run_experiment(cfg)


def test_timeline_peak_equals_max_memory_allocated(preset):
    h = preset["history"]
    assert "error" not in h, h.get("error")
    assert h["source"] == "cuda_snapshot" and not h["truncated"]
    rows = timeline.series(h)
    top = max(row["total"] for row in rows)
    print(
        f"timeline peak {top} B, max_memory_allocated {preset['peak_bytes']} B, start {h['start_bytes']} B, "
        f"baseline {preset['baseline_bytes']} B, {h['raw_events']} events, coalesced {h['coalesced']}"
    )
    assert top == h["peak_bytes"] == preset["peak_bytes"]
    assert h["start_bytes"] == preset["baseline_bytes"]
    # The last phase's reading, less what was freed after it (the step's 512-byte loss).
    assert 0 <= preset["phases"][-1]["allocated_bytes"] - h["final_bytes"] <= 4096
    assert [p["phase"] for p in h["phases"]] == [p["phase"] for p in preset["phases"]]
    assert all(p["seq"] is not None for p in h["phases"])


def test_timeline_categories_match_the_parameters(preset):
    rows = timeline.series(preset["history"])
    params = LAYERS * (_round(WIDTH * WIDTH * 4) + _round(WIDTH * 4))
    end = rows[-1]
    print({k: v for k, v in end.items() if k not in ("seq", "phase")})
    assert end["parameters"] == params
    assert end["gradients"] == params
    assert end["optimizer_state"] >= 2 * params


def test_segments_at_the_peak_hold_the_peak(preset):
    h = preset["history"]
    assert h["segments_at"] == "peak"
    allocated = sum(b["size"] for s in h["segments"] for b in s["blocks"] if b["state"] == "allocated")
    reserved = sum(s["total_bytes"] for s in h["segments"])
    free = reserved - allocated
    print(f"segments at the peak: {len(h['segments'])}, reserved {reserved} B, allocated {allocated} B, free {free} B")
    assert allocated == h["peak_bytes"]
    assert reserved >= allocated


def test_the_snapshot_pickle_loads_in_memory_viz(preset):
    path = preset["history"]["snapshot"]["path"]
    raw = open(path, "rb").read()
    assert raw[:2] == b"\x80\x04", "pickle protocol 4: pytorch.org/memory_viz cannot read protocol 5"
    snapshot = pickle.loads(raw)
    assert snapshot["segments"] and snapshot["device_traces"]
    from torch.cuda import _memory_viz

    assert "<html" in _memory_viz.trace_plot(snapshot).lower()
    assert "<html" in _memory_viz.segment_plot(snapshot).lower()
    _memory_viz.segsum(snapshot)
    # As the recording script stores it: gzip, unpacked for download.
    assert pickle.loads(gzip.decompress(gzip.compress(raw)))["segments"]


def test_recording_stops_after_a_run(preset):
    x = torch.empty(3 * 2**20 + 123, dtype=torch.uint8, device="cuda")
    traces = torch.cuda.memory._snapshot()["device_traces"][torch.cuda.current_device()]
    assert not any(e.get("action") == "alloc" and e.get("addr") == x.data_ptr() for e in traces)


def test_an_out_of_memory_run_keeps_its_timeline_and_stops_recording():
    cfg = ExperimentConfig(
        model="mlp",
        layers=8,
        width=2048,
        batch=65536,
        steps=2,
        timing_steps=0,
        device="cuda",
        budget_mb=512,
        force=True,
    )
    r = run_experiment(cfg)
    assert r["oom"]
    h = r["history"]
    assert "error" not in h, h.get("error")
    print(f"OOM run: {h['raw_events']} events, peak {h['peak_bytes']} B")
    test_recording_stops_after_a_run(None)


def test_fragmentation_segments_carry_their_blocks():
    r = run_fragmentation("holes", device="cuda", steps=24, size_mb=6)
    for name, run in r["runs"].items():
        segs = run["end"]["segments"]
        assert segs and all(s["blocks"] for s in segs), name
        for s in segs:
            assert sum(b["size"] for b in s["blocks"]) == s["total_bytes"]
            assert sum(b["size"] for b in s["blocks"] if b["state"] == "allocated") == s["allocated_bytes"]


def test_census_of_a_leak_on_cuda():
    r = run_leak("cache_outputs", steps=4, device="cuda", batch=64, width=512, layers=4)
    grown = [g for g in r["census"]["groups"] if g["bytes_delta"] or g["count_delta"]]
    assert len(grown) == 1
    assert (grown[0]["shape"], grown[0]["device"], grown[0]["bytes_delta"]) == ([64, 512], "cuda", 64 * 512 * 4)
