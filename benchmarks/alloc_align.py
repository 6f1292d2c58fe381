"""Where a configuration's CUDA estimate and its real run part, allocation by allocation.

    python benchmarks/alloc_align.py real CONFIG_JSON real.json.gz       # on the GPU: the engine's run, the allocator's history
    python benchmarks/alloc_align.py replay CONFIG_JSON replay.json.gz   # anywhere: the CUDA estimate's trace, each event's op
    python benchmarks/alloc_align.py align real.json.gz replay.json.gz [--least BYTES]

`align` matches the two sequences of allocation sizes (512-byte blocks, at least --least bytes) and prints every
stretch where they differ, with the live total after each allocation, the real side's Python frames and the replay's
aten op and phase tag: the first stretch is where the estimate's model of the run is wrong. CONFIG_JSON is a grid
row's configuration (docs/benchmarks/estimate-grid-*.json). The real history is the run's own (its timeline's
recording, Python stacks, read before the run stops it): a recording of this script's around the run made torch 2.11
fail (SystemError: error return without exception set).
"""

from __future__ import annotations

import difflib
import gzip
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def real(config: str, out: str) -> None:
    import torch

    from benchmarks.boundary_trial import config_of
    from benchmarks.trial_history import frames
    from experiments.measure import history
    from experiments.measure.run import run_experiment

    # The run records the allocator's history itself (its timeline) and stops it at the end: a second recording around
    # it failed (SystemError), so the run's own is read just before it stops, with room for every event.
    snaps, stop = [], history.Recording.stop

    def stop_after_snapshot(self) -> None:
        if self.recording and not snaps:
            snaps.append(torch.cuda.memory._snapshot())
        stop(self)

    history.MAX_ENTRIES, history.Recording.stop = 2_000_000, stop_after_snapshot
    result = run_experiment(config_of(config))
    snap = snaps[0]
    events = [[e["action"], e.get("size"), e.get("addr"), frames(e, 5)] for e in snap["device_traces"][0]]
    with gzip.open(out, "wt") as f:
        json.dump({"config": json.loads(config), "peak_bytes": result.get("peak_bytes"), "events": events}, f)
    print(out, len(events), "events; peak", result.get("peak_bytes"))


def replay(config: str, out: str) -> None:
    import experiments.estimate.replay as rp
    from benchmarks.boundary_trial import config_of
    from experiments.estimate.estimator import cuda_config

    ops: dict[int, tuple[str, str]] = {}
    dispatch = rp.ReplayTracker.__torch_dispatch__

    def labelled(self, func, types, args=(), kwargs=None):
        before, self._op = getattr(self, "_op", ""), str(func)
        try:
            return dispatch(self, func, types, args, kwargs)
        finally:
            self._op = before

    class Log(rp.AllocationLog):
        def allocated(self, tracker, key, rec, t, requested):
            super().allocated(tracker, key, rec, t, requested)
            ops[len(self.events) - 1] = (getattr(tracker, "_op", ""), tracker.tag)

        def held(self, tracker, items):
            first = len(self.events)
            super().held(tracker, items)
            for i in range(len(items)):
                ops[first + i] = ("scratch of " + getattr(tracker, "_op", ""), tracker.tag)

    kept = rp.ReplayTracker.__torch_dispatch__, rp.AllocationLog
    rp.ReplayTracker.__torch_dispatch__, rp.AllocationLog = labelled, Log
    try:
        result = rp.replay(cuda_config(config_of(config)), block=512, keep_events=True)
    finally:  # the labels are this script's; a process that replays afterwards gets the engine's own classes back
        rp.ReplayTracker.__torch_dispatch__, rp.AllocationLog = kept
    events = [[kind, key, n, *ops.get(i, ("", ""))] for i, (kind, key, n) in enumerate(result["events"])]
    with gzip.open(out, "wt") as f:
        json.dump({"peak_bytes": result.get("peak_bytes"), "events": events}, f)
    print(out, len(events), "events; peak", result.get("peak_bytes"))


def allocations_real(events: list, least: int) -> list[tuple[int, int, str]]:
    out, live, total = [], {}, 0
    for action, n, addr, frames in events:
        if action == "alloc":
            live[addr], total = n, total + n
            if n >= least:
                out.append((n, total, " < ".join(frames)))
        elif action == "free_completed" and addr in live:
            total -= live.pop(addr)
    return out


def allocations_replay(events: list, least: int) -> list[tuple[int, int, str]]:
    out, live, total = [], {}, 0
    for kind, key, n, op, tag in events:
        if kind == "alloc":
            n = -(-n // 512) * 512
            live[key], total = n, total + n
            if n >= least:
                out.append((n, total, f"{op} [{tag}]"))
        elif kind == "free" and key in live:
            total -= live.pop(key)
    return out


def align(real_path: str, replay_path: str, least: int = 4096, show: int = 6) -> list[str]:
    with gzip.open(real_path, "rt") as f:
        r = allocations_real(json.load(f)["events"], least)
    with gzip.open(replay_path, "rt") as f:
        m = allocations_replay(json.load(f)["events"], least)
    lines = [f"real: {len(r)} allocations, replay: {len(m)} (of {least} bytes or more)"]
    matcher = difflib.SequenceMatcher(None, [x[0] for x in r], [x[0] for x in m], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        lines.append(f"--- {tag}: real [{i1}:{i2}], replay [{j1}:{j2}]")
        lines += [f"   real   {n:>13,} live {t:>14,}  {where}" for n, t, where in r[i1:i2][:show]]
        lines += [f"   replay {n:>13,} live {t:>14,}  {where}" for n, t, where in m[j1:j2][:show]]
    return lines


def main() -> None:
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    if what == "real" and len(sys.argv) == 4:
        real(sys.argv[2], sys.argv[3])
    elif what == "replay" and len(sys.argv) == 4:
        replay(sys.argv[2], sys.argv[3])
    elif what == "align" and len(sys.argv) in (4, 6):
        least = int(sys.argv[5]) if len(sys.argv) == 6 else 4096
        print("\n".join(align(sys.argv[2], sys.argv[3], least)))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
