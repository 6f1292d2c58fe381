"""What exercise 2's "Run and grade" costs in the engine: the learner's measured run, the gradient check and the
timing rounds (baseline, the choice, the shortlist), run as the worker runs them, with the machine's load.

    PYTHONPATH=. python benchmarks/ex2_grading.py                                  # on the CPU, the CPU-sized challenge
    PYTHONPATH=. python benchmarks/ex2_grading.py --device cuda                    # on a GPU, the GPU challenge
    PYTHONPATH=. python benchmarks/ex2_grading.py --choice precision=fp32 accum=4  # another learner's choice
"""

from __future__ import annotations

import argparse
import os
import time

from course import content
from course.grading import ex2
from experiments.core.config import ExperimentConfig
from experiments.estimate.estimator import estimate
from experiments.jobs.kinds import execute


def _estimate(config: dict, device_type: str) -> dict:
    return estimate(ExperimentConfig.from_dict(config), device_type=device_type)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=ex2.DEVICE_TYPES, default="cpu")
    parser.add_argument("--choice", nargs="*", default=["accum=2"], help="field=value of the learner's choice")
    args = parser.parse_args()
    s = ex2.settings(content.meta("exercise2"))
    ch = ex2.challenge(s, args.device, _estimate)
    choice = {f: ex2.options(s, f, args.device)[0] for f in s.fields}
    for item in args.choice:
        field, _, raw = item.partition("=")
        choice[field] = int(raw) if raw.isdigit() else raw
    t0 = time.perf_counter()
    short = ex2.shortlist(s, ch["base"], ch["budget"], args.device, _estimate)  # the page does it in the background
    print(f"shortlist (background on the page): {time.perf_counter() - t0:.1f} s, {short['fitting']} fit")
    params, roles = ex2.rounds_job(s, ch["base"], choice, short, args.device)
    mine = ExperimentConfig.from_dict(ex2.config_of(ch["base"], choice)).to_dict()
    load = os.getloadavg()[0]
    got, total = {}, 0.0
    for kind, job in (("run", mine), ("guard", mine), ("timing_rounds", params)):
        t0 = time.perf_counter()
        got[kind] = execute(kind, job)
        took = time.perf_counter() - t0
        total += took
        print(f"{kind:14s} {took:6.1f} s")
    print(
        f"grading total  {total:6.1f} s on {os.cpu_count()} cores, load {load:.1f} before, {os.getloadavg()[0]:.1f} after"
    )
    a = ex2.assess(s, got["run"], got["guard"], got["timing_rounds"], roles, ch["budget"])
    print("checks", a["checks"], "score", a["score"], "best", a["best"])
    for who, summary in (("vs baseline", a["vs_base"]), ("vs best", a["vs_best"])):
        if summary:
            print(f"{who}: {summary['median']:.2f}x ({summary['lo']:.2f}-{summary['hi']:.2f}), {summary['verdict']}")


if __name__ == "__main__":
    main()
