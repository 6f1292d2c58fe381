"""Every figure a recording stores beside its raw data is the raw data's own: the peak and its phase of the phases,
the step time of its samples, the rate of the step time, a round's median of its rounds, a leak's growth of its steps,
and a data-parallel run's figures of rank 0's (the other ranks are checked by the facts that quote them). A lesson
quotes the stored figure, so a figure edited without its data (or data re-recorded without its figure) fails here."""

from __future__ import annotations

import json
import statistics

import pytest

from experiments.core import metrics
from experiments.core.recorded import ROOT as RECORDED_DIR

FILES = sorted(RECORDED_DIR.glob("*/*.json"))


def _close(a, b, tol) -> bool:
    return a is not None and b is not None and abs(a - b) <= tol


def stored_vs_raw(result: dict) -> list[str]:
    """What the recording stores that its raw data does not give."""
    out = []
    phases = result.get("phases") or []
    if "setup_peak_bytes" in result:  # a data-parallel rank: its peak is the training steps', the setup's its own
        setup = [p for p in phases if not p.get("step")]
        phases = [p for p in phases if p.get("step")]
        if setup and result["setup_peak_bytes"] != max(p["peak_bytes"] for p in setup):
            out.append(f"setup_peak_bytes {result['setup_peak_bytes']} is not its setup phases' highest peak")
    if phases and result.get("peak_bytes") is not None and not result.get("oom"):
        top = max(p["peak_bytes"] for p in phases)
        if result["peak_bytes"] != top:
            out.append(f"peak_bytes {result['peak_bytes']} is not its phases' highest peak {top}")
        at = {(p.get("step"), p["phase"]) for p in phases if p["peak_bytes"] == top}
        where = result.get("peak_phase") or {}
        if where and (where.get("step"), where.get("phase")) not in at:
            out.append(f"peak_phase {where} is not where its phases peak: {sorted(at, key=str)}")
    timing = result.get("step_ms") or {}
    if timing.get("samples"):
        median = statistics.median(timing["samples"])
        if not _close(timing.get("median"), median, 1e-3):
            out.append(f"step_ms.median {timing.get('median')} is not its samples' median {median}")
        if result.get("tflops") and result.get("flops_per_step"):
            rate = result["flops_per_step"] / (timing["median"] / 1e3) / 1e12
            if not _close(result["tflops"], rate, 1e-6 * rate):
                out.append(f"tflops {result['tflops']} is not flops_per_step over the median step: {rate}")
    for row in result.get("strategies") or []:
        rounds = row.get("round_ms")
        if rounds and not _close(row.get("median_ms"), statistics.median(rounds), 1e-3):
            out.append(f"{row.get('id')}: median_ms {row.get('median_ms')} is not its rounds' median")
        if rounds and not (
            _close(row.get("min_ms"), min(rounds), 1e-3) and _close(row.get("max_ms"), max(rounds), 1e-3)
        ):
            out.append(f"{row.get('id')}: min_ms/max_ms are not its rounds' lowest and highest")
    if result.get("per_step") and "growth_bytes_per_step" in result:
        growth = metrics.growth_per_step(result["per_step"])
        if not _close(result["growth_bytes_per_step"], growth, 1e-6):
            out.append(f"growth_bytes_per_step {result['growth_bytes_per_step']} is not its steps' growth {growth}")
    ranks = result.get("ranks") or []
    if ranks:
        for key in ("peak_bytes", "baseline_bytes", "breakdown", "peak_phase", "phases"):
            if key in ranks[0] and result.get(key) != ranks[0][key]:
                out.append(f"{key} is not rank 0's")
        for rank in ranks:
            out += [
                f"rank {rank.get('rank')}: {w}" for w in stored_vs_raw({k: v for k, v in rank.items() if k != "ranks"})
            ]
    return out


@pytest.mark.parametrize("path", FILES, ids=[f"{p.parent.name}/{p.name}" for p in FILES])
def test_stored_figures_are_their_raw_datas(path):
    entry = json.loads(path.read_text(encoding="utf-8"))
    result = entry.get("result") or {}
    runs = [result] + [r for r in (result.get("runs") or {}).values() if isinstance(r, dict)]
    wrong = [w for r in runs for w in stored_vs_raw(r)]
    assert not wrong, "\n".join(wrong)


def test_a_figure_edited_without_its_data_is_caught():
    entry = json.loads((RECORDED_DIR / "h200" / "compare-baseline.json").read_text(encoding="utf-8"))
    result = entry["result"]
    assert stored_vs_raw(result) == []
    for edit in (
        lambda r: r["step_ms"].update(median=r["step_ms"]["median"] * 0.8),
        lambda r: r.update(peak_bytes=r["peak_bytes"] + 2**20),
        lambda r: r.update(peak_phase={"step": 2, "phase": "forward"}),
        lambda r: r.update(tflops=r["tflops"] * 1.2),
    ):
        edited = json.loads(json.dumps(result))
        edit(edited)
        assert stored_vs_raw(edited), edit
    leak = json.loads((RECORDED_DIR / "h200" / "leaks-leak-reference_cycle.json").read_text(encoding="utf-8"))["result"]
    assert stored_vs_raw(leak) == []
    assert stored_vs_raw({**leak, "growth_bytes_per_step": leak["growth_bytes_per_step"] * 0.95})
