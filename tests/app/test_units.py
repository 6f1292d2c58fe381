"""Pieces of the app that need no Streamlit run: translations, frames, the 'what would fit' search."""

from __future__ import annotations

import re
from pathlib import Path

from app import frames
from app.fit import largest_fitting_batch
from app.i18n import STRINGS
from experiments.config import CHOICES, ExperimentConfig

APP = Path(__file__).resolve().parents[2] / "app"


def test_every_string_has_both_languages():
    for key, pair in STRINGS.items():
        assert len(pair) == 2 and all(isinstance(s, str) and s.strip() for s in pair), key


def test_every_literal_key_used_in_the_app_exists():
    used = set()
    for path in APP.rglob("*.py"):
        used |= set(re.findall(r"\bt\(\s*[\"']([a-z_0-9.]*[a-z_0-9])[\"']", path.read_text()))
    missing = sorted(k for k in used if k not in STRINGS)
    assert not missing, missing


def test_dynamic_keys_exist():
    fields = ExperimentConfig().to_dict()
    assert all(f"field.{f}" in STRINGS for f in fields)
    assert all(f"opt.{f}.{v}" in STRINGS for f, values in CHOICES.items() for v in values)
    assert all(f"cat.{c}" in STRINGS for c in frames.CATEGORIES)
    phases = ("model", "optimizer", "data", "zero_grad", "forward", "backward", "optimizer_step")
    assert all(f"phase.{p}" in STRINGS for p in phases)


def test_phases_frame_on_cpu_has_no_reserved():
    result = {
        "config": {"accum": 2},
        "phases": [
            {"step": 0, "micro": None, "phase": "model", "allocated_bytes": 2**20, "reserved_bytes": None,
             "peak_bytes": 2**20, "ms": 1.0},
            {"step": 1, "micro": 0, "phase": "forward", "allocated_bytes": 2**21, "reserved_bytes": None,
             "peak_bytes": 2**22, "ms": 2.0},
            {"step": 1, "micro": 1, "phase": "forward", "allocated_bytes": 2**21, "reserved_bytes": None,
             "peak_bytes": 2**22, "ms": 2.0},
        ],
    }
    df = frames.phases_frame(result)
    assert df["label"].is_unique
    assert df["reserved_mib"].isna().all()
    long = frames.memory_long(df, with_reserved=False)
    assert set(long["series"]) == {"Peak within phase", "Allocated at end"}


def test_largest_fitting_batch_is_the_boundary():
    from experiments.estimator import estimate

    cfg = ExperimentConfig(layers=4, width=512, batch=64, accum=2)
    capacity = estimate(cfg.replace(batch=1000))["peak_bytes"]
    best = largest_fitting_batch(cfg, capacity, estimate)
    assert best is not None and best % 2 == 0
    assert estimate(cfg.replace(batch=best))["peak_bytes"] <= capacity
    assert estimate(cfg.replace(batch=best + 2))["peak_bytes"] > capacity
    assert largest_fitting_batch(cfg, 1, estimate) is None
