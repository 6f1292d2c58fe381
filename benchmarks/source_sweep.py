"""Sweep Hugging Face model types through the command line as a learner runs it: `estimate --json`, then `run --json`
on the CPU (`--force` where the estimate names what it cannot predict), each call in a process of its own with a
time limit, and compare the estimate's phase rows and categories with the real run's. One JSON line per case.

    python benchmarks/source_sweep.py --types afmoe,beit --out /tmp/sweep.jsonl
    python benchmarks/source_sweep.py --untested causal_lm --jobs 2 --out /tmp/sweep.jsonl
    python benchmarks/source_sweep.py --report /tmp/sweep.jsonl

Outcomes: exact (every phase's allocated and peak bytes and every category equal), off (the first phase that
differs and by how much), named (the estimate names an op or a reason it cannot predict; the forced run's outcome
beside it), refused (one line, the message kept), traceback (a call printed a traceback or died), timeout; `slow`
marks a call over 30 s. Where the estimate refuses an override the model has no setting for, the case is tried
again without it (as a learner would), and the dropped overrides are kept.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEXT = {"layers": 2, "hidden": 64, "heads": 4, "kv_heads": 4, "intermediate": 128, "vocab": 256}
IMAGE = {"layers": 2, "hidden": 64, "heads": 4, "intermediate": 128}
LEVERS = ["--batch", "2", "--device", "cpu", "--steps", "2", "--timing-steps", "0", "--optimizer", "adamw"]


def call(verb: str, args: list[str], timeout: float) -> dict:
    t0 = time.perf_counter()
    try:
        p = subprocess.run(
            [sys.executable, "-m", "experiments", verb, *args, "--json"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"rc": None, "seconds": round(time.perf_counter() - t0, 1), "timeout": True}
    out = {"rc": p.returncode, "seconds": round(time.perf_counter() - t0, 1)}
    err = [ln for ln in p.stderr.splitlines() if ln.strip() and not re.match(r"\[\s*\d+/\d+\]", ln)]
    if "Traceback" in p.stderr or "Traceback" in p.stdout:
        out["traceback"] = "\n".join(err[-6:])
    try:
        out["json"] = json.loads(p.stdout)
    except json.JSONDecodeError:
        out["stdout"] = p.stdout.strip()[-2000:]
    out["stderr"] = err[-3:]
    return out


def rows(phases) -> list[tuple]:
    return [(p["step"], p["micro"], p["phase"], p["allocated_bytes"], p["peak_bytes"]) for p in phases]


def compare(est: dict, run: dict) -> dict:
    fake, real = rows(est["phases"]), rows(run["phases"])
    if len(fake) != len(real):
        return {"outcome": "off", "why": f"{len(fake)} phases estimated, {len(real)} run"}
    for f, r in zip(fake, real, strict=True):
        if f != r:
            return {
                "outcome": "off",
                "phase": f"{r[2]} (step {r[0]})",
                "allocated_delta": f[3] - r[3],
                "peak_delta": f[4] - r[4],
                "peak_real": r[4],
            }
    if est["categories"] != run["breakdown"]:
        diff = {
            k: (est["categories"].get(k), run["breakdown"].get(k))
            for k in set(est["categories"]) | set(run["breakdown"])
        }
        return {"outcome": "off", "why": "categories", "categories": {k: v for k, v in diff.items() if v[0] != v[1]}}
    return {"outcome": "exact", "peak": run["peak_bytes"]}


def source_args(model_type: str, head: str | None, overrides: dict, levers: list[str]) -> list[str]:
    args = ["--model-type", model_type] + (["--head", head] if head else [])
    for k, v in overrides.items():
        args += ["--set", f"{k}={v}"]
    return args + LEVERS + levers


def without_unknown_settings(command: str, model_type: str, head, overrides: dict, levers: list[str], timeout: float):
    """`command`'s result with the overrides the model type has no such setting for dropped, one at a time: (the
    result, its arguments, the overrides kept, the ones dropped)."""
    overrides, dropped = dict(overrides), []
    while True:
        args = source_args(model_type, head, overrides, levers)
        result = call(command, args, timeout)
        msg = " ".join(result.get("stderr", []) + [result.get("stdout", "")])
        m = re.search(r"(\w+): \w+ has no such setting", msg)
        if not (result.get("rc") and m and m.group(1) in overrides):
            return result, args, overrides, dropped, msg
        dropped.append(m.group(1))
        overrides.pop(m.group(1))


def case(model_type: str, head: str | None, overrides: dict, levers: list[str], timeout: float) -> dict:
    est, args, overrides, dropped, msg = without_unknown_settings(
        "estimate", model_type, head, overrides, levers, timeout
    )
    out = {"type": model_type, "head": head, "overrides": overrides, "dropped": dropped, "levers": levers}
    out["estimate_s"] = est["seconds"]
    if est.get("timeout"):
        return out | {"outcome": "timeout", "where": "estimate"}
    if "traceback" in est:
        return out | {"outcome": "traceback", "where": "estimate", "detail": est["traceback"]}
    if "json" not in est:  # a refusal of the configuration (a named op comes back as JSON, exit status 3)
        return out | {"outcome": "refused", "message": msg.strip()[:400]}
    e = est["json"]
    forced = not e.get("predicted", True)
    run = call("run", args + (["--force"] if forced else []), timeout)
    return out | judge(e, run)


def judge(e: dict, run: dict) -> dict:
    """The outcome of a case from its estimate `e` and its run (forced where `e` names what it cannot predict)."""
    out = {"run_s": run["seconds"], "slow": run["seconds"] > 30}
    if not e.get("predicted", True):
        out |= {"outcome": "named", "message": (e.get("cannot_predict") or {}).get("message", "")[:300]}
        if run.get("timeout") or "traceback" in run or run["rc"]:
            out["forced_run"] = run.get("traceback") or " ".join(run.get("stderr", []))[:300] or "timeout"
        else:
            out["forced_run"] = "ran" if run["json"].get("oom") is None else "oom"
        return out
    if run.get("timeout"):
        return out | {"outcome": "timeout", "where": "run"}
    if "traceback" in run:
        return out | {"outcome": "traceback", "where": "run", "detail": run["traceback"]}
    if run["rc"] or "json" not in run:
        return out | {"outcome": "run_refused", "message": " ".join(run.get("stderr", []))[:400]}
    if run["json"].get("oom"):
        return out | {"outcome": "run_oom"}
    return out | compare(e, run["json"])


def quick_case(model_type: str, head: str | None, overrides: dict, levers: list[str], timeout: float) -> dict:
    """`run --json` first: a run that its estimate predicts carries that estimate (the one `estimate` prints), so one
    process gives both; only where the run refuses are `estimate` and a forced run asked for."""
    run, _, overrides, dropped, _ = without_unknown_settings("run", model_type, head, overrides, levers, timeout)
    out = {"type": model_type, "head": head, "overrides": overrides, "dropped": dropped, "levers": levers}
    if run.get("rc") == 0 and "json" in run and run["json"].get("estimate", {}).get("phases"):
        return out | judge(run["json"]["estimate"], run)
    return case(model_type, head, overrides, levers, timeout) | {"dropped": dropped}


def default_overrides(model_type: str) -> tuple[dict, list[str]]:
    from transformers import AutoConfig

    from experiments.training.hf_models import model_types

    tasks = model_types()[model_type]
    if "image_classification" in tasks and not any(t in tasks for t in ("masked_lm", "causal_lm")):
        size = getattr(AutoConfig.for_model(model_type), "image_size", 224)
        size = size if isinstance(size, int) and 8 <= size <= 512 else 224
        return dict(IMAGE), ["--image-size", str(size)]
    return dict(TEXT), ["--seq-len", "16"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--types", default="")
    ap.add_argument("--head", default=None)
    ap.add_argument("--set", default="", help="extra overrides k=v,k=v on top of the defaults")
    ap.add_argument("--levers", default="", help="extra command-line levers, space separated")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--out", default="")
    ap.add_argument("--report", default="")
    a = ap.parse_args()
    if a.report:
        for line in Path(a.report).read_text().splitlines():
            r = json.loads(line)
            detail = {k: r[k] for k in ("phase", "peak_delta", "why", "message", "forced_run", "detail") if k in r}
            print(f"{r['type']:28} {str(r['levers'][-1:]):12} {r['outcome']:10} {detail}")
        return
    jobs = []
    for model_type in [t for t in a.types.split(",") if t]:
        overrides, levers = default_overrides(model_type)
        overrides |= {k: v for k, v in (kv.split("=") for kv in a.set.split(",") if kv)}
        jobs.append((model_type, a.head, overrides, levers + a.levers.split()))
    sink = open(a.out, "a") if a.out else sys.stdout  # noqa: SIM115
    with ThreadPoolExecutor(a.jobs) as pool:
        for r in pool.map(lambda j: quick_case(*j, a.timeout), jobs):
            sink.write(json.dumps(r) + "\n")
            sink.flush()
            print(r["type"], r["outcome"], r.get("phase", r.get("message", ""))[:150], file=sys.stderr)


if __name__ == "__main__":
    main()
