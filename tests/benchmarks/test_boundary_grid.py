"""The boundary grid's bookkeeping, with a fake trial: the bisection finds the boundary from any answer, and what a
process holds outside the allocator is measured once per model and levers, by a trial that had the GPU to itself."""

from __future__ import annotations

import threading

import pytest

from benchmarks import boundary_trial

GPU = 100


def cell(card: str, answer: int, preset: str = "gpt2", levers: dict | None = None) -> dict:
    levers = levers or {"precision": "bf16"}
    return {
        "preset": preset,
        "card": card,
        "levers": levers,
        "card_bytes": 40,
        "answer": {"default": answer, "expandable": answer},
    }


@pytest.fixture
def fake(monkeypatch):
    calls = []

    def child(params, card_bytes, expandable, outside=None):
        calls.append((params["batch"], outside is None))
        ran = params["batch"] <= 7
        return {"ran": ran, "exclusive": outside is None, "outside_start_bytes": 3, "outside_end_bytes": 5}

    monkeypatch.setattr(boundary_trial, "child", child)
    return calls


def grid(done=None):
    rows = []
    g = boundary_trial.Grid(done or {}, rows.append, boundary_trial.GpuMemory(GPU), deadline=float("inf"))
    return g, rows


@pytest.mark.parametrize("answer", [0, 1, 6, 7, 8, 30])
def test_the_bisection_finds_the_boundary_from_any_answer(fake, answer):
    g, rows = grid()
    assert g.boundary(cell("a", answer), expandable=False) == 7
    assert {r["batch"]: r["ran"] for r in rows}[7] and not {r["batch"]: r["ran"] for r in rows}[8]


def test_one_exclusive_trial_per_model_and_levers_shared_across_cards(fake):
    g, _ = grid()
    for card in ("a", "b", "c"):
        g.boundary(cell(card, 7), expandable=False)
    assert sum(exclusive for _, exclusive in fake) == 1
    g.boundary(cell("d", 7, levers={"precision": "fp32"}), expandable=False)
    assert sum(exclusive for _, exclusive in fake) == 2


def test_an_exclusive_trial_that_ran_out_of_memory_is_not_shared(monkeypatch):
    calls = []

    def child(params, card_bytes, expandable, outside=None):
        calls.append(outside is None)
        return {"ran": card_bytes > 10 and params["batch"] <= 3, "outside_start_bytes": 3, "outside_end_bytes": 5}

    monkeypatch.setattr(boundary_trial, "child", child)
    g, _ = grid()
    small = dict(cell("small", 0), card_bytes=10)
    assert g.boundary(small, expandable=False) == 0
    g.boundary(cell("large", 3), expandable=False)
    assert calls.count(True) == 2  # the large card measured its own


def test_a_resumed_grid_reuses_the_recorded_figures(fake):
    g, rows = grid()
    g.boundary(cell("a", 7), expandable=False)
    done = {r["key"]: r for r in rows}
    fake.clear()
    g2, _ = grid(done)
    g2.boundary(cell("b", 7), expandable=False)
    assert not any(exclusive for _, exclusive in fake)


def test_trials_never_hold_more_than_the_gpu():
    gpu = boundary_trial.GpuMemory(GPU)
    held, most, lock = [0], [0], threading.Lock()

    def take(n):
        with gpu(n):
            with lock:
                held[0] += n
                most[0] = max(most[0], held[0])
            threading.Event().wait(0.01)
            with lock:
                held[0] -= n

    threads = [threading.Thread(target=take, args=(n,)) for n in (40, 40, 100, 30, 60, 10) * 3]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] <= GPU and gpu.free == GPU
