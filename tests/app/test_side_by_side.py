"""Side by side: a pinned result beside a later one, on one scale, with what differs and the peak ratio."""

from __future__ import annotations

import json

from app.charts import memory
from experiments.core.metrics import net_peak
from tests.app.pages import open_page, run_until, small_config


def _done(at):
    return "monitoring.done" in at.session_state


def test_pinned_run_beside_a_later_run_on_one_scale():
    at = open_page("monitoring", state=small_config("monitoring"))
    at.button(key="monitoring.run").click().run()
    run_until(at, _done)
    first = at.session_state["monitoring.done"]["statuses"][0]["result"]
    at.button(key="monitoring.pin").click().run()
    assert (
        at.session_state["side_by_side.pinned"]["result"] is first
        or at.session_state["side_by_side.pinned"]["result"]["config"] == first["config"]
    )
    at.select_slider(key="monitoring_batch").set_value(64).run()
    at.button(key="monitoring.run").click().run()
    run_until(at, lambda a: a.session_state["monitoring.done"]["statuses"][0]["result"]["config"]["batch"] == 64)
    assert not at.exception
    second = at.session_state["monitoring.done"]["statuses"][0]["result"]
    texts = [m.value for m in at.markdown] + [c.value for c in at.caption]
    assert any("Side by side" in s for s in texts)
    assert any("Batch size: 8 → 64" in s for s in texts), texts
    ratio = net_peak(second) / net_peak(first)
    assert any(f"{ratio:.2f}×" in s for s in texts)
    # both memory charts share the y scale: the larger of the two runs' highest figure, plus a margin
    top = max(
        memory.long(df, df["reserved_mib"].notna().any())["mib"].max()
        for df in (memory.frame(first), memory.frame(second))
    )
    domains = [
        layer["encoding"]["y"].get("scale", {}).get("domain")
        for spec in (json.loads(c.proto.spec) for c in at.get("vega_lite_chart"))
        for layer in spec.get("layer", [])[:1]
        if "y" in layer.get("encoding", {})
    ]
    assert sum(1 for d in domains if d and abs(d[1] - top * 1.05) < 1e-6) == 2, (domains, top)
