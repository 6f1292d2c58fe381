"""Pieces of the app that need no Streamlit run: the phases frame, the 'what would fit' search."""

from __future__ import annotations

from app.charts import memory
from course.fit import largest_fitting_batch
from experiments.core.config import ExperimentConfig


def test_phases_frame_on_cpu_has_no_reserved():
    result = {
        "config": {"accum": 2},
        "phases": [
            {
                "step": 0,
                "micro": None,
                "phase": "model",
                "allocated_bytes": 2**20,
                "reserved_bytes": None,
                "peak_bytes": 2**20,
                "ms": 1.0,
            },
            {
                "step": 1,
                "micro": 0,
                "phase": "forward",
                "allocated_bytes": 2**21,
                "reserved_bytes": None,
                "peak_bytes": 2**22,
                "ms": 2.0,
            },
            {
                "step": 1,
                "micro": 1,
                "phase": "forward",
                "allocated_bytes": 2**21,
                "reserved_bytes": None,
                "peak_bytes": 2**22,
                "ms": 2.0,
            },
        ],
    }
    df = memory.frame(result)
    assert df["label"].is_unique
    assert df["reserved_mib"].isna().all()
    long = memory.long(df, with_reserved=False)
    assert set(long["series"]) == {"Peak within phase", "Allocated at end"}


def test_largest_fitting_batch_is_the_boundary():
    from experiments.estimate.estimator import estimate

    cfg = ExperimentConfig(layers=4, width=512, batch=64, accum=2)
    capacity = estimate(cfg.replace(batch=1000))["peak_bytes"]
    best = largest_fitting_batch(cfg, capacity, estimate)
    assert best is not None and best % 2 == 0
    assert estimate(cfg.replace(batch=best))["peak_bytes"] <= capacity
    assert estimate(cfg.replace(batch=best + 2))["peak_bytes"] > capacity
    assert largest_fitting_batch(cfg, 1, estimate) is None


def test_largest_fitting_batch_equals_a_scan_for_any_growing_peak():
    """The guided search assumes only that the peak does not shrink with the batch: checked on seeded curves
    (flat, then linear, with jumps) against a plain scan, counting the estimator calls."""
    import random

    rng = random.Random(5)
    for _ in range(200):
        accum = rng.choice((1, 2, 4))
        cfg = ExperimentConfig(layers=2, width=64, batch=accum * 4, accum=accum)
        knee, slope = rng.randint(1, 3000), rng.choice((0, 1, 7, 1000))
        jumps = sorted(rng.sample(range(1, 4000), 3))

        def peak(batch, knee=knee, slope=slope, jumps=jumps):
            return 10_000 + max(0, batch - knee) * slope + 5_000 * sum(batch >= j for j in jumps)

        calls = []

        def estimate(c, peak=peak, calls=calls):
            calls.append(c.batch)
            return {"peak_bytes": peak(c.batch)}

        capacity = rng.randint(9_000, 40_000)
        upper = rng.choice((None, 4096))
        top = (upper or 65536) // accum
        fitting = [u * accum for u in range(1, top + 1) if peak(u * accum) <= capacity]
        want = fitting[-1] if fitting else None
        assert largest_fitting_batch(cfg, capacity, estimate, upper=upper) == want, (knee, slope, jumps, capacity)
        assert len(set(calls)) <= 3 * 17 + 2  # plain bisection: 17; a straight line: a handful
