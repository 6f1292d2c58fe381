"""README's CPU speed sentence quotes the browser benchmark it names (docs/cpu-speed.json), not a wish: each figure
is that run's median, so a new benchmark run that changes them fails here until the README says so."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _medians() -> dict[str, float]:
    data = json.loads((ROOT / "docs" / "cpu-speed.json").read_text())
    return {a["action"]: a["median_s"] for a in data["actions"]}


def test_the_readme_quotes_the_browser_benchmark():
    readme = " ".join((ROOT / "README.md").read_text().split())
    m = _medians()
    first = [v for k, v in m.items() if k.endswith("Run (first)") and not k.startswith("leaks: scenarios")]
    grading = [v for k, v in m.items() if k.endswith("Run and grade")]
    assert f"a lesson preset takes {min(first):.1f}-{max(first):.1f} s" in readme
    assert f"a cached result {m['monitoring: Run (cached)']:.2f} s" in readme
    assert f"lesson 6's two ranks {m['multigpu: Run on every rank']:.1f} s" in readme
    assert f"compare's Run all {m['compare: Run all']:.0f} s" in readme
    assert f"a grading {min(grading):.1f}-{max(grading):.1f} s" in readme
