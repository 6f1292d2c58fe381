"""The CPU fit check counts what the worker process itself needs during a run (experiments/measure/fits.py): on a
CPU running past the free memory is a kill by the system, so a run whose tensors fit but not with the worker's own
margin is refused, saying why; a budget run (the simulated out-of-memory error) stays the way to teach one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from experiments.core import capacity
from experiments.core.config import ExperimentConfig
from experiments.core.units import MIB
from experiments.estimate.estimator import estimate
from experiments.measure import fits

CPU = torch.device("cpu")
CFG = ExperimentConfig(device="cpu", layers=4, width=512, batch=64)


@pytest.fixture(scope="module")
def need() -> int:
    return estimate(CFG, device_type="cpu")["peak_bytes"]


def _free(monkeypatch, nbytes):
    monkeypatch.setattr(fits, "cpu_available_bytes", lambda: int(nbytes))


def test_tensors_that_fit_but_not_with_the_workers_own_memory_are_refused(monkeypatch, need):
    margin = fits.process_margin_bytes(need)
    _free(monkeypatch, need + margin // 2)  # the tensors fit; the worker's growth during the run does not
    for force in (False, True):
        with pytest.raises(fits.WouldNotFit) as refused:
            fits.check_fits(CFG.replace(force=force), CPU)
        assert refused.value.code == "host_memory" and "the worker process itself needs" in str(refused.value)
        assert refused.value.params == {"peak_bytes": need + margin, "available_bytes": need + margin // 2}
    _free(monkeypatch, need / 1.07)  # 7 % above the free memory was started and killed: refused now
    with pytest.raises(fits.WouldNotFit):
        fits.check_fits(CFG, CPU)
    _free(monkeypatch, need + margin + 64 * MIB)
    assert fits.check_fits(CFG, CPU)[1]["peak_bytes"] == need  # with room to spare it runs


def test_a_budget_run_still_teaches_the_out_of_memory_error(monkeypatch, need):
    budget_mb = need / MIB / 1.1  # a budget the run passes: the tracker raises a simulated out-of-memory error
    _free(
        monkeypatch, budget_mb * MIB + fits.process_margin_bytes(budget_mb * MIB) + MIB
    )  # the budget and the margin fit
    with pytest.raises(fits.WouldNotFit):
        fits.check_fits(CFG, CPU)  # without the budget this run would pass the free memory
    capacity, est = fits.check_fits(CFG.replace(budget_mb=budget_mb), CPU)
    assert capacity == int(budget_mb * MIB) < est["peak_bytes"]


def test_the_margin_is_the_measured_one():
    measured = json.loads((Path(__file__).resolve().parents[2] / "docs" / "worker-rss.json").read_text())
    for run in measured["runs"]:  # every run's growth beyond its tensors is covered, by at most 128 MiB more
        margin = capacity.process_margin_bytes(run["tensor_peak_bytes"])
        assert run["beyond_tensors_bytes"] <= margin, run["params"]
    worst = max(measured["runs"], key=lambda r: r["beyond_tensors_bytes"])
    assert capacity.process_margin_bytes(worst["tensor_peak_bytes"]) <= worst["beyond_tensors_bytes"] + 128 * MIB
    assert capacity.PROCESS_BASE_BYTES >= measured["rss_imported_bytes"] - measured["rss_bare_bytes"]
    free = 4 * 2**30  # the page's "fits" and the runner's refusal meet at the same tensor bytes
    t = capacity.cpu_free_for_tensors(free)
    assert t + capacity.process_margin_bytes(t) <= free < t + 2 + capacity.process_margin_bytes(t + 2)
