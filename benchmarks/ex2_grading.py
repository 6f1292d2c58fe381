"""What exercise 2's "Run and grade" costs in the engine: the learner's measured run, the gradient check and the
timing rounds (baseline, the choice, the shortlist), run as the worker runs them, with the machine's load.

    PYTHONPATH=. python benchmarks/ex2_grading.py                                  # on the CPU, the CPU-sized challenge
    PYTHONPATH=. python benchmarks/ex2_grading.py --device cuda                    # on a GPU, the GPU challenge
    PYTHONPATH=. python benchmarks/ex2_grading.py --choice precision=fp32 accum=4  # another learner's choice
    PYTHONPATH=. python benchmarks/ex2_grading.py --threads 1     # one thread: its CPU seconds are the work
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from course import content
from course.grading import ex2
from experiments.core.config import ExperimentConfig
from experiments.estimate.estimator import estimate
from experiments.estimate.steptime import predict_step_ms
from experiments.jobs.kinds import execute
from experiments.measure.device import device_info


def _estimate(config: dict, device_type: str) -> dict:
    return estimate(ExperimentConfig.from_dict(config), device_type=device_type)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=ex2.DEVICE_TYPES, default="cpu")
    parser.add_argument("--choice", nargs="*", default=["accum=2"], help="field=value of the learner's choice")
    parser.add_argument("--threads", type=int, help="torch threads (1: CPU seconds close to the work, under load)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    s = ex2.settings(content.meta("exercise2"))
    ch = ex2.challenge(s, args.device, _estimate)
    choice = {f: ex2.options(s, f, args.device)[0] for f in s.fields}
    for item in args.choice:
        field, _, raw = item.partition("=")
        choice[field] = int(raw) if raw.isdigit() else raw
    t0 = time.perf_counter()
    rates = device_info(args.device).get("rates")  # as the page ranks: by the step predicted from these

    def step_ms(est: dict, precision: str) -> float:
        return predict_step_ms(est["step"], rates, precision, args.device)["center_ms"]

    short = ex2.shortlist(s, ch["base"], ch["budget"], args.device, _estimate, step_ms if rates else None)
    took = time.perf_counter() - t0
    print(f"shortlist (the page's background search): {took:.1f} s, {short['fitting']} fit, by {short['ranked_by']}")
    params, roles = ex2.rounds_job(s, ch["base"], choice, short, args.device)
    mine = ExperimentConfig.from_dict(ex2.run_config(ch["base"], choice)).to_dict()
    load = os.getloadavg()[0]
    print("timed:", ", ".join(st["id"] for st in params["strategies"]))
    got, total, cpu = {}, 0.0, 0.0
    for kind, job in (("run", mine), ("guard", mine), ("timing_rounds", params)):
        t0, c0 = time.perf_counter(), time.process_time()
        got[kind] = execute(kind, job)
        took, used = time.perf_counter() - t0, time.process_time() - c0
        total, cpu = total + took, cpu + used
        print(f"{kind:14s} {took:6.1f} s wall, {used:6.1f} s CPU")
    # CPU seconds grow less with the neighbours' load than wall time: on 2 idle cores the wall time lies between
    # half of them (both threads busy) and all of them.
    print(
        f"grading total  {total:6.1f} s wall, {cpu:6.1f} s CPU, {torch.get_num_threads()} threads, {os.cpu_count()} cores"
    )
    print(f"load average {load:.1f} before, {os.getloadavg()[0]:.1f} after")
    for row in got["timing_rounds"]["strategies"]:
        print(f"  {row['id']}: {row['median_ms']:.1f} ms per step (median over rounds), rounds {row['round_ms']}")
    a = ex2.assess(s, got["run"], got["guard"], got["timing_rounds"], roles, ch["budget"])
    print("checks", a["checks"], "score", a["score"], "best", a["best"])
    for who, summary in (("vs baseline", a["vs_base"]), ("vs best", a["vs_best"])):
        if summary:
            print(f"{who}: {summary['median']:.2f}x ({summary['lo']:.2f}-{summary['hi']:.2f}), {summary['verdict']}")


if __name__ == "__main__":
    main()
