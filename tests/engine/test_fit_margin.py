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


GPU = torch.device("cuda", 0)


def _gpu(monkeypatch, free, reserved=0, allocated=0, host=64 << 30):
    monkeypatch.setattr(fits.torch.cuda, "mem_get_info", lambda device=None: (int(free), 80 << 30))
    monkeypatch.setattr(fits.torch.cuda, "memory_reserved", lambda device=None: reserved)
    monkeypatch.setattr(fits.torch.cuda, "memory_allocated", lambda device=None: allocated)
    _free(monkeypatch, host)


def test_a_paged_optimizers_managed_memory_past_the_gpus_free_memory_is_refused_even_when_forced(monkeypatch):
    """Paged state is CUDA managed memory, outside the allocator's figures: asked past the GPU's free memory it can
    stall the GPU for every process on it (no out-of-memory error says so), so the check adds it to the peak and no
    force lifts it. The allocator's cached blocks count as free, as for the peak."""
    est = {"peak_bytes": 30 << 30, "paged_bytes": 16 << 30, "host_peak_bytes": 0}
    _gpu(monkeypatch, free=40 << 30, reserved=4 << 30, allocated=1 << 30)  # 43 GiB free with the cache
    with pytest.raises(fits.WouldNotFit) as refused:
        fits.beside_the_allocator(est, est["peak_bytes"], GPU)
    assert refused.value.code == "paged_memory" and "even when forced" in str(refused.value)
    assert refused.value.params == {"peak_bytes": 46 << 30, "available_bytes": 43 << 30}
    _gpu(monkeypatch, free=46 << 30)
    fits.beside_the_allocator(est, est["peak_bytes"], GPU)  # exactly what is free: runs
    with pytest.raises(fits.WouldNotFit):  # two copies of the state (a graded run beside its baseline)
        fits.beside_the_allocator(est, 2 * est["peak_bytes"], GPU, copies=2)
    fits.beside_the_allocator(dict(est, paged_bytes=0), 45 << 30, GPU)  # no paged state: the capacity check's


def test_offloaded_activations_past_the_hosts_free_memory_are_refused(monkeypatch):
    est = {"peak_bytes": 10 << 30, "paged_bytes": 0, "host_peak_bytes": 8 << 30}
    pinned_need = (8 << 30) + fits.process_margin_bytes(8 << 30)
    _gpu(monkeypatch, free=80 << 30, host=pinned_need - 1)
    with pytest.raises(fits.WouldNotFit) as refused:
        fits.beside_the_allocator(est, est["peak_bytes"], GPU)
    assert refused.value.code == "pinned_memory" and refused.value.params["peak_bytes"] == 8 << 30
    _gpu(monkeypatch, free=80 << 30, host=pinned_need)
    fits.beside_the_allocator(est, est["peak_bytes"], GPU)


def test_the_fit_check_of_a_cuda_run_asks_what_is_beside_the_allocator(monkeypatch):
    est = {"peak_bytes": 30 << 30, "paged_bytes": 16 << 30, "host_peak_bytes": 0, "unmeasured": []}
    monkeypatch.setattr(fits, "capacity_bytes", lambda cfg, device: 40 << 30)
    monkeypatch.setattr(fits, "estimate", lambda *a, **k: est)
    _gpu(monkeypatch, free=40 << 30)
    with pytest.raises(fits.WouldNotFit) as refused:
        fits.check_fits(ExperimentConfig(device="cuda", force=True), GPU)
    assert refused.value.code == "paged_memory"
