"""The allocation timeline (experiments/measure/history.py) on CPU: its bytes add up to the tracker's figures, its
categories to a hand count, and the segment replay and the coalescing keep what they promise."""

import random

import torch
from torch import nn

from experiments.core import timeline
from experiments.core.config import ExperimentConfig
from experiments.measure import history, segments
from experiments.measure.run import run_experiment
from experiments.measure.tracker import MemoryTracker

LAYERS, WIDTH, BATCH = 2, 64, 8
PARAM_BYTES = LAYERS * (WIDTH * WIDTH + WIDTH) * 4


def _run(**kw):
    cfg = ExperimentConfig(
        model="mlp",
        layers=LAYERS,
        width=WIDTH,
        batch=BATCH,
        steps=3,
        timing_steps=0,
        device="cpu",
        optimizer="adam",
        **kw,
    )
    return run_experiment(cfg)


def test_event_bytes_reproduce_the_runs_peak_and_final_level():
    r = _run()
    h = r["history"]
    assert h["source"] == "cpu_tracker" and not h["coalesced"]
    rows = timeline.series(h)
    assert max(row["total"] for row in rows) == r["peak_bytes"] == h["peak_bytes"]
    assert rows[-1]["total"] == h["final_bytes"] == h["start_bytes"] + sum(e["bytes"] for e in h["events"])
    # One boundary per measured phase, in order.
    assert [(p["phase"], p["step"]) for p in h["phases"]] == [(p["phase"], p["step"]) for p in r["phases"]]
    seqs = [p["seq"] for p in h["phases"]]
    assert seqs == sorted(seqs)


def test_a_hand_loop_matches_the_tracker_exactly():
    rec = history.Recording(torch.device("cpu"))
    tracker = MemoryTracker(listeners=[rec])
    rec.start(tracker)
    with tracker:
        tracker.phase_started("model", 0, None)
        model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32))
        tracker.phase_started("forward", 1, None)
        out = model(torch.randn(4, 32)).square().mean()
        tracker.phase_started("backward", 1, None)
        out.backward()
        del out
    h = rec.finish()
    assert h["peak_bytes"] == tracker.peak
    assert h["final_bytes"] == tracker.current == sum(e["bytes"] for e in h["events"])


def test_categories_match_a_hand_count_for_a_tiny_mlp():
    r = _run()
    rows = timeline.series(r["history"])
    end = rows[-1]
    n_tensors = 2 * LAYERS  # weight and bias per layer
    assert end["parameters"] == PARAM_BYTES
    assert end["gradients"] == PARAM_BYTES  # set_to_none: created in backward, alive after the step
    assert end["optimizer_state"] == 2 * PARAM_BYTES + 4 * n_tensors  # exp_avg, exp_avg_sq, a 4-byte step each
    assert end["data"] == 2 * BATCH * WIDTH * 4  # inputs and targets
    peak = next(row for row in rows if row["total"] == r["peak_bytes"])
    for cat, nbytes in r["breakdown"].items():
        assert peak.get(cat, 0) == nbytes, cat
    frames = {e["frame"] for e in r["history"]["events"] if e["category"] == "parameters"}
    assert frames and all(f.startswith("models.py:") for f in frames)


def test_history_can_be_switched_off():
    cfg = ExperimentConfig(model="mlp", layers=1, width=16, batch=4, steps=2, timing_steps=0, device="cpu")
    assert "history" not in run_experiment(cfg, history=False)


def test_coalescing_keeps_the_peak_and_the_final_level():
    rng = random.Random(0)
    events, live = [], []
    for seq in range(5000):
        if live and rng.random() < 0.5:
            nbytes = -live.pop(rng.randrange(len(live)))
        else:
            nbytes = rng.choice([512, 4096, 2**20])
            live.append(nbytes)
        events.append(
            {
                "seq": seq,
                "bytes": nbytes,
                "category": rng.choice(["activations", "temporaries"]),
                "phase": seq // 700,
                "frame": None,
                "addr": seq,
                "n": 1,
            }
        )
    full = timeline.build(events, [], 100, "cpu_tracker")
    small, coalesced = timeline.coalesce(events, 400)
    assert coalesced and len(small) <= 400 + 2 * 8
    run, peak = 100, 100
    for e in small:
        run += e["bytes"]
        peak = max(peak, run)
    assert (peak, run) == (full["peak_bytes"], full["final_bytes"])
    assert sum(e["n"] for e in small) == len(events)


MiB = 2**20
A = 0x7F0000000000


def _snapshot():
    """Two segments: a 2 MiB one with a live 512 B block, and a 20 MiB one holding a live 6 MiB block at its end."""
    return [
        {
            "device": 0,
            "address": A,
            "total_size": 2 * MiB,
            "segment_type": "small",
            "blocks": [
                {"address": A, "size": 512, "state": "active_allocated"},
                {"address": A + 512, "size": 2 * MiB - 512, "state": "inactive"},
            ],
        },
        {
            "device": 0,
            "address": A + 100 * MiB,
            "total_size": 20 * MiB,
            "segment_type": "large",
            "blocks": [
                {"address": A + 100 * MiB, "size": 14 * MiB, "state": "inactive"},
                {"address": A + 114 * MiB, "size": 6 * MiB, "state": "active_allocated"},
            ],
        },
    ]


def test_segments_parse_with_free_space_visible():
    segs = segments.view(segments.parse_segments(_snapshot()))
    assert [s["total_bytes"] for s in segs] == [2 * MiB, 20 * MiB]
    big = segs[1]
    assert [(b["offset"], b["size"], b["state"]) for b in big["blocks"]] == [
        (0, 14 * MiB, "free"),
        (14 * MiB, 6 * MiB, "allocated"),
    ]


def test_segments_at_the_peak_are_replayed_backwards():
    big = A + 100 * MiB
    trace = [
        {"action": "alloc", "addr": big, "size": 6 * MiB},
        {"action": "alloc", "addr": big + 6 * MiB, "size": 8 * MiB},  # peak: 14 MiB + 6 MiB + 512 B live
        {"action": "free_requested", "addr": big, "size": 6 * MiB},
        {"action": "free_completed", "addr": big, "size": 6 * MiB},
        {"action": "free_requested", "addr": big + 6 * MiB, "size": 8 * MiB},
        {"action": "free_completed", "addr": big + 6 * MiB, "size": 8 * MiB},
        {"action": "segment_alloc", "addr": A + 300 * MiB, "size": 2 * MiB},  # reserved after the peak
    ]
    end = _snapshot() + [
        {
            "device": 0,
            "address": A + 300 * MiB,
            "total_size": 2 * MiB,
            "blocks": [{"address": A + 300 * MiB, "size": 2 * MiB, "state": "inactive"}],
        }
    ]
    segs, at = segments.segments_at(end, trace, 1, {big: ("activations", "models.py:26 forward")})
    assert at == "peak" and len(segs) == 2
    blocks = [(b["offset"], b["size"], b["state"], b["category"]) for b in segs[1]["blocks"]]
    assert blocks == [
        (0, 6 * MiB, "allocated", "activations"),
        (6 * MiB, 8 * MiB, "allocated", "other"),
        (14 * MiB, 6 * MiB, "allocated", "other"),
    ]
    # A trace that does not fit the state (entries lost) falls back to the snapshot's own state.
    segs, at = segments.segments_at(end, trace + [{"action": "alloc", "addr": A + 999 * MiB, "size": 512}], 1)
    assert at == "end" and len(segs) == 3


def test_expandable_segment_unmap_is_undone():
    base = A + 500 * MiB
    end = [
        {
            "device": 0,
            "address": base,
            "total_size": 2 * MiB,
            "is_expandable": True,
            "blocks": [{"address": base, "size": 2 * MiB, "state": "inactive"}],
        }
    ]
    trace = [
        {"action": "alloc", "addr": base, "size": 6 * MiB},
        {"action": "free_completed", "addr": base, "size": 6 * MiB},
        {"action": "segment_unmap", "addr": base + 2 * MiB, "size": 4 * MiB},
    ]
    segs, at = segments.segments_at(end, trace, 0)
    assert at == "peak" and segs[0]["total_bytes"] == 6 * MiB
    assert [(b["size"], b["state"]) for b in segs[0]["blocks"]] == [(6 * MiB, "allocated")]


def test_trace_events_use_markers_for_phases_and_the_tracker_for_categories():
    marker = [{"filename": history.__file__, "line": 1, "name": history._MARKER}]
    user = [
        {"filename": "/x/torch/nn/functional.py", "line": 5, "name": "linear"},
        {"filename": "/app/experiments/training/models.py", "line": 26, "name": "forward"},
    ]
    m = 0x1000
    old = {"action": "alloc", "addr": 0x9000, "size": 512, "frames": user}  # before this run: ignored
    trace = [
        old,
        {"action": "alloc", "addr": m, "size": 512, "frames": marker},
        {"action": "free_requested", "addr": m, "size": 512},
        {"action": "free_completed", "addr": m, "size": 512},
        {"action": "alloc", "addr": m, "size": 512, "frames": marker},
        {"action": "free_requested", "addr": m, "size": 512},
        {"action": "free_completed", "addr": m, "size": 512},
        {"action": "alloc", "addr": 0x5000, "size": 4096, "frames": user},  # a tensor the tracker saw
        {"action": "alloc", "addr": m, "size": 1024, "frames": user},  # reuses the marker's address, untracked
        {"action": "free_completed", "addr": m, "size": 1024},
    ]

    class Rec:
        tag = "_forward"

    tracked = [(0.0, 4000, Rec(), 0x5000, None, 0)]
    events, seqs, truncated, start, tindex = history.trace_events(trace, [m, m], tracked)
    assert not truncated and start == 2 and seqs == [0, 0]
    assert [(e["bytes"], e["category"], e["phase"]) for e in events] == [
        (4096, "temporaries", 0),
        (1024, "other", 0),
        (-1024, "other", 0),
    ]
    assert events[0]["frame"] == "models.py:26 forward"
    assert tindex == [5, 6, 7]
