"""Record real GPU results for every lesson preset, so learners without a GPU can see them.

    python benchmarks/record_results.py --out recorded/h200
Writes one JSON file per experiment ({"id", "lesson", "label", "kind", "result"}); the app lists them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from experiments.config import ExperimentConfig  # noqa: E402
from experiments.jobs import execute  # noqa: E402


def jobs_from_lessons() -> list[dict]:
    jobs = []
    for meta_path in sorted((ROOT / "lessons").glob("*/meta.json")):
        lesson = meta_path.parent.name
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        title = meta.get("title", {"en": lesson, "zh": lesson})
        if "preset" in meta:
            jobs.append({"id": f"{lesson}-preset", "lesson": lesson, "kind": "run", "params": meta["preset"],
                         "label": {"en": f"{title['en']}: preset", "zh": f"{title['zh']}：预设"}})
            if lesson == "analysis":
                jobs.append({"id": "analysis-profile", "lesson": lesson, "kind": "profile", "params": meta["preset"],
                             "label": {"en": "Profiler table of one step", "zh": "单步 profiler 表"}})
        for t in meta.get("techniques", []):
            for which in ("config", "baseline"):
                jobs.append({"id": f"{lesson}-{t['id']}-{which}", "lesson": lesson, "kind": "run",
                             "params": dict(meta.get("preset", {}), **t[which]),
                             "label": {lang: f"{t['title'][lang]} ({which})" for lang in ("en", "zh")}})
        for s in meta.get("strategies", []):
            jobs.append({"id": f"{lesson}-{s['id']}", "lesson": lesson, "kind": "run",
                         "params": dict(meta.get("preset", {}), **s["config"]), "label": s["title"]})
        for s in meta.get("leak_scenarios", []):
            jobs.append({"id": f"{lesson}-leak-{s['id']}", "lesson": lesson, "kind": "leak",
                         "params": {"scenario": s["id"], "steps": 10}, "label": s["title"]})
    return jobs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "recorded" / "h200"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for job in jobs_from_lessons():
        params = dict(job["params"], device="cuda")
        if job["kind"] in ("run", "profile"):
            params = ExperimentConfig.from_dict(dict(params, timing_steps=params.get("timing_steps", 20))).to_dict()
        t0 = time.time()
        try:
            result = execute(job["kind"], params)
        except Exception as e:  # noqa: BLE001 - record what failed and go on with the rest
            print(f"{job['id']}: FAILED {type(e).__name__}: {e}")
            continue
        if job["kind"] == "run" and result.get("memory_summary"):
            result["memory_summary"] = result["memory_summary"][:20000]
        (out / f"{job['id']}.json").write_text(json.dumps({**job, "params": params, "result": result}, default=str))
        peak = result.get("peak_bytes")
        print(f"{job['id']}: {time.time() - t0:.1f} s" + (f", peak {peak / 2**20:.1f} MiB" if peak else ""))


if __name__ == "__main__":
    main()
