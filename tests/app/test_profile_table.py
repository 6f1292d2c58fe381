"""The profiler's operator table writes memory in MiB like the rest of the app, sorted by the column that matters,
which comes right after the operator so that a half-width column on a projector shows it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.charts import profile
from app.i18n import STRINGS
from course import catalog
from course.units import MIB

RECORDED = Path(__file__).resolve().parents[2] / "recorded" / catalog.RECORDED_FOLDER


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_profile_table_in_mib_sorted_with_its_sort_column_second(device):
    rows = json.loads((RECORDED / f"{catalog.profile_id('analysis')}.json").read_text())["result"]["rows"]
    df, sorted_by = profile.table(rows, device)
    key = "self_device_memory_bytes" if device == "cuda" else "self_cpu_memory_bytes"
    assert sorted_by == STRINGS["prof." + key][0] and list(df.columns)[:2] == [STRINGS["prof.name"][0], sorted_by]
    assert all("bytes" not in c for c in df.columns) and "(MiB)" in sorted_by
    raw = sorted((r.get(key) for r in rows if r.get(key) is not None), reverse=True)
    assert df[sorted_by].tolist() == pytest.approx([round(b / MIB, 2) for b in raw])
