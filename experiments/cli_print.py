"""The command line's text output: a person's summary of each result (--json prints the whole result instead)."""

from __future__ import annotations

import dataclasses
import os

from .core.limits import ENV, JOB_SECONDS_ENV
from .core.units import GIB, MIB, fmt_bytes


def _mb(n) -> str:
    return "-" if n is None else f"{n / MIB:10.2f}"


def print_run(r: dict) -> None:
    d = r["device"]
    print(f"device: {d['type']} {d.get('name')}  torch {d['torch_version']}")
    print(f"{'step':>4} {'micro':>5} {'phase':<15} {'alloc MiB':>10} {'reserved':>10} {'peak MiB':>10} {'ms':>9}")
    for p in r["phases"]:
        micro = "" if p["micro"] is None else p["micro"]
        print(
            f"{p['step']:>4} {micro:>5} {p['phase']:<15} {_mb(p['allocated_bytes'])} {_mb(p['reserved_bytes'])} "
            f"{_mb(p['peak_bytes'])} {p['ms']:9.2f}"
        )
    if r["oom"]:
        print(f"OUT OF MEMORY in {r['oom']['phase']} (step {r['oom']['step']}): {r['oom']['message']}")
    if r["peak_bytes"] is not None:
        net = r["peak_bytes"] - r["baseline_bytes"]
        est = r["estimate"]["peak_bytes"]
        said = "no estimate (cannot be predicted)" if est is None else f"estimate {_mb(est).strip()} MiB"
        print(
            f"peak: {_mb(r['peak_bytes']).strip()} MiB in {r['peak_phase']['phase']} (step {r['peak_phase']['step']}); "
            f"above baseline {_mb(net).strip()} MiB; {said}"
        )
    if r["step_ms"]:
        s = r["step_ms"]
        print(
            f"step time: median {s['median']:.3f} ms (p10 {s['p10']:.3f}, p90 {s['p90']:.3f}); "
            f"{r['samples_per_s']:.1f} samples/s; {r['tflops']:.2f} TFLOP/s"
        )
    if r["breakdown"]:
        print("at peak: " + ", ".join(f"{k} {_mb(v).strip()} MiB" for k, v in r["breakdown"].items() if v))


def print_distributed(r: dict) -> None:
    d = r["device"]
    print(f"device: {d['type']} {d.get('name')}  torch {d['torch_version']}  backend {r['backend']}")
    print(
        f"strategy {r['strategy']}, world size {r['world_size']}, batch {r['per_rank_batch']} per rank "
        f"({r['global_batch']} global)"
    )
    for rank in r["ranks"]:
        print(f"-- rank {rank['rank']}")
        print_run({**r, **rank, "estimate": r["estimate"], "step_ms": None})
        s = rank.get("step_ms")
        if s:
            print(f"step time with communication: median {s['median']:.3f} ms (p10 {s['p10']:.3f}, p90 {s['p90']:.3f})")
    for e in r["errors"]:
        print(f"ERROR {e}")
    u = r.get("update_check")
    if u:
        print(
            f"update vs single device: {'OK' if u['ok'] else 'DIFFERS'} (max abs diff {u['max_abs_diff']:.3g}, "
            f"largest update {u['max_update']:.3g})"
        )


def leak_summary(r: dict) -> str:
    """One line a person reads: how much the loop keeps per step (--json prints every step and the census)."""
    growth = r.get("growth_bytes_per_step") or 0
    where = f"{r['scenario']} on {r['device']['type'] if isinstance(r.get('device'), dict) else r.get('device')}"
    steps = sum(1 for row in r.get("per_step") or [] if row.get("step"))  # step 0: before the loop
    verdict = f"grows {fmt_bytes(int(growth))} per step" if growth > 0 else "does not grow"
    freed = r.get("gc_freed_bytes") or 0
    tail = f"; gc.collect() freed {fmt_bytes(int(freed))}" if freed else ""
    return f"{where}: {verdict} over {steps} steps (batch {r['batch']}, width {r['width']}){tail}"


def guard_summary(r: dict) -> str:
    """One line: do the gradients match the fp32 baseline within the precision's tolerance."""
    verdict = "match" if r["ok"] else "DIFFER from"
    return (
        f"gradients {verdict} the {r['baseline_precision']} baseline: largest difference {r['max_abs_diff']:.3g} "
        f"(relative {r['max_rel_diff']:.3g}), tolerance {r['tolerance']:.3g} ({r['precision']}, checkpoint "
        f"{r['checkpoint']}, accumulation {r['accum']})"
    )


def print_family_estimate(e: dict) -> None:
    """A person's summary of the estimate; --json prints all of it (its terms, phases and method)."""
    phase = f" (in {e['peak_phase']})" if e.get("peak_phase") else ""
    print(f"estimated peak: {e['peak_bytes'] / MIB:,.1f} MiB{phase}  [{e.get('method')} on {e.get('device_type')}]")
    for category, size in (e.get("categories") or {}).items():
        if size:
            print(f"  {category:<16} {size / MIB:>10,.1f} MiB")
    if e.get("fits") is not None:
        print(f"fits the budget of {e['capacity_bytes'] / MIB:,.1f} MiB: {'yes' if e['fits'] else 'no'}")
    print("(--json for the whole estimate: each category's terms, the steady state, the method)")


def print_methods(r: dict) -> None:
    card = f"{r['card']}: " if r.get("card") else ""
    held = r["overhead_bytes"] / GIB
    print(f"{card}{r['capacity_bytes'] / GIB:.2f} GiB, {held:.2f} GiB of it outside PyTorch's allocator")
    largest = any("largest_batch" in row for row in r["methods"])
    print(f"{'method':8} {'checkpoint':10} {'peak GiB':>9}  " + ("largest batch  " if largest else "") + "runs")
    reasons: list[str] = []  # each refusal once, whole, under the table (a cut one would hide the op it names)
    for row in r["methods"]:
        peak = "-" if row["peak_bytes"] is None else f"{row['peak_bytes'] / GIB:.3f}"
        runs = {True: "yes", False: "no"}.get(row["runs"])
        if runs is None:
            why = row.get("cannot_predict") or "no reason given"
            reasons += [] if why in reasons else [why]
            runs = f"not predicted ({reasons.index(why) + 1})"
        most = f"{row.get('largest_batch', '-'):>13}  " if largest else ""
        print(f"{row['finetune']:8} {row['checkpoint']:10} {peak:>9}  {most}{runs}")
    for i, why in enumerate(reasons, 1):
        print(f"({i}) {why}")
    f = r["first_that_runs"]
    print(
        "none of them runs on this card"
        if f is None
        else f"first that runs: {f['finetune']}, checkpoint {f['checkpoint']}"
    )


def print_limits(limits) -> int:
    """The limits in effect, one a line, and where they come from."""
    source = os.environ.get(ENV) or (os.environ.get(JOB_SECONDS_ENV) and JOB_SECONDS_ENV)
    print(f"limits: {source or 'none set, the defaults'}")
    for name, value in dataclasses.asdict(limits).items():
        print(f"  {name:22} {'none' if value is None else f'{value:g}'}")
    return 0
