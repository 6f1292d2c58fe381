"""What a learner without a GPU waits for: every lesson's CPU-sized preset, each "try this" run, the
optimization page's "Measure the claim" pairs, and the compare page's "Compare all" (every strategy, then the
interleaved timing rounds), run in the engine on the CPU exactly as the worker runs them (docs/cpu-speed.md).

    python benchmarks/cpu_presets.py
    python benchmarks/cpu_presets.py --full-pairs smaller_batch checkpoint_transformer   # a pair at full size
"""

from __future__ import annotations

import argparse
import time

from course import catalog, content
from experiments.core.config import ExperimentConfig
from experiments.jobs.kinds import execute
from experiments.measure.run import run_experiment


def _run(config: dict) -> tuple[float, dict]:
    t0 = time.perf_counter()
    result = run_experiment(ExperimentConfig.from_dict({**config, "device": "cpu"}))
    return time.perf_counter() - t0, result


def pairs(scale_of) -> None:
    """Both runs of every technique the optimization page measures, at the size `scale_of(meta)` gives."""
    meta = content.meta("optimization")
    k = scale_of(meta)
    print(f"\n| technique (both runs, {k}x smaller) | baseline size | engine time |\n|---|---|---|")
    for tech in meta["techniques"]:
        config, baseline = content.technique_configs(meta, tech, k)
        seconds = sum(_run(c)[0] for c in (config, baseline))
        print(
            f"| {tech['id']} | {baseline['layers']} x {baseline['width']}, batch {baseline['batch']}"
            f"{', seq ' + str(baseline['seq_len']) if baseline.get('model') == 'transformer' else ''} | "
            f"{seconds:.1f} s |",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full-pairs", nargs="+", metavar="TECHNIQUE", help="time these pairs at full size only")
    args = ap.parse_args()
    run_experiment(ExperimentConfig(layers=2, width=64, batch=8, device="cpu"))  # imports and first-call costs
    if args.full_pairs:
        meta = content.meta("optimization")
        for tech in (x for x in meta["techniques"] if x["id"] in args.full_pairs):
            config, baseline = content.technique_configs(meta, tech)
            print(f"{tech['id']} at full size: {sum(_run(c)[0] for c in (config, baseline)):.1f} s", flush=True)
        return
    print("| lesson | run | size | engine time | median step |\n|---|---|---|---|---|")
    worst = 0.0
    for lesson in catalog.LESSON_IDS:
        meta = content.meta(lesson)
        if "preset" not in meta or meta.get("strategies"):
            continue
        k = content.cpu_scale(meta)
        runs = [("preset", None)] + [
            (f"try ({kind})", p["try_change"]) for kind, p in (meta.get("prompts") or {}).items() if p.get("try_change")
        ]
        for name, change in runs:
            config = content.over_preset(meta, change, k)
            seconds, result = _run(config)
            worst = max(worst, seconds)
            print(
                f"| {lesson} | {name} | {config['layers']} x {config['width']}, batch {config['batch']} | "
                f"{seconds:.2f} s | {result['step_ms']['median']:.1f} ms |",
                flush=True,
            )
    pairs(content.cpu_scale)
    meta = content.meta("compare")
    k = content.cpu_scale(meta)
    strategies = [(s["id"], content.over_preset(meta, s.get("config"), k)) for s in meta["strategies"]]
    t0 = time.perf_counter()
    for _, config in strategies:
        run_experiment(ExperimentConfig.from_dict({**config, "device": "cpu"}))
    runs_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    execute("timing_rounds", content.rounds_params(meta, strategies, device="cpu"))
    rounds_s = time.perf_counter() - t0
    print(f"\nLongest single run: {worst:.2f} s.")
    print(
        f"Compare all ({len(strategies)} strategies, {k}x smaller): {runs_s:.1f} s; "
        f"the timing rounds after them: {rounds_s:.1f} s; together {runs_s + rounds_s:.1f} s."
    )


if __name__ == "__main__":
    main()
