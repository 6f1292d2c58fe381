"""Which rule tells a run that gets through a card from one that does not: every default-allocator trial of
docs/benchmarks/fits-trials-*.jsonl replayed through the allocator model (experiments/estimate/allocator_limit.py)
and judged four ways, against whether the trial ran. Torch on the CPU; about ten minutes on two cores.

    python benchmarks/fits_rules.py            # the table of docs/benchmarks/fits-boundary.md

B: the card less what the process holds outside the allocator; L: B / (1 + RESERVED_MARGIN).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from experiments.core.capacity import reserved_limit  # noqa: E402 - after the path
from experiments.core.cards import card, overhead_bytes  # noqa: E402
from experiments.core.config import ExperimentConfig  # noqa: E402
from experiments.distributed.fits_traces import events  # noqa: E402
from experiments.distributed.model_fits import card_reserved  # noqa: E402
from experiments.estimate.allocator_limit import first_oom, peak_reserved, reserved_through  # noqa: E402
from experiments.estimate.estimator import preset_defaults  # noqa: E402

RULES = {
    "reserved peak with nothing given back <= L": lambda ev, b, lim: peak_reserved(ev) <= lim,
    "gives back at L, gets through": lambda ev, b, lim: first_oom(ev, lim) is None,
    # the rule "What fits" uses (experiments/distributed/model_fits.py), not restated here
    "gives back at B, gets through, its reserved peak <= L": lambda ev, b, lim: card_reserved(ev, b) <= lim,
    "gives back at B, gets through": lambda ev, b, lim: reserved_through(ev, b) is not None,
}


def trials() -> list[dict]:
    rows = []
    for path in sorted((ROOT / "docs" / "benchmarks").glob("fits-trials-*.jsonl")):
        rows += [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in rows if "error" not in r and not r["expandable"] and r["batch"] > 1]


def main() -> None:
    wrong = {name: [] for name in RULES}
    careful = dict.fromkeys(RULES, 0)
    traces: dict = {}
    rows = trials()
    for r in rows:
        source = f"preset:{r['preset']}"
        cfg = ExperimentConfig.from_dict(
            {"model_source": source, **preset_defaults(source), **r["levers"], "device": "cuda", "steps": 2}
        )
        c = card(r["card"])
        budget = c["total_bytes"] - overhead_bytes(c)
        limit = reserved_limit(budget)
        ev = events(cfg.replace(batch=r["batch"], accum=1), None, traces)
        for name, rule in RULES.items():
            says = rule(ev, budget, limit)
            if says and not r["ran"]:
                wrong[name].append(f"{r['preset']} {r['card']} {r['batch']}")
            careful[name] += not says and r["ran"]
    print(f"{len(rows)} default-allocator trials")
    print("| rule | says runs, the trial failed | says no, the trial ran |\n|---|---|---|")
    for name in RULES:
        print(f"| {name} | {len(wrong[name])} ({', '.join(wrong[name])}) | {careful[name]} |")


if __name__ == "__main__":
    main()
