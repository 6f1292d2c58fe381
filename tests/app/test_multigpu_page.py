"""The multi-GPU page's "What fits": what it says is what experiments.distributed.estimate.what_fits finds."""

from __future__ import annotations

from experiments.core.config import ExperimentConfig
from experiments.distributed.estimate import what_fits
from experiments.estimate.estimator import estimate
from tests.app.pages import open_page, small_config

NS = "multigpu"


def _find(at, mib: int):
    at.number_input(key=f"{NS}_capacity").set_value(mib).run()
    at.button(key=f"{NS}.fits").click().run()
    return " ".join(s.value for s in at.success) + " ".join(w.value for w in at.warning)


def test_what_fits_says_what_the_search_finds():
    # English only: AppTest maps a select box's value back through its format_func outside the session, where the
    # page's language is not known (the Chinese page is looked at in the browser test and screenshots).
    lang = "en"
    state = small_config(NS) | {f"{NS}_layers": 4, f"{NS}_width": 256, f"{NS}_batch": 64}
    at = open_page(NS, lang, state=state)
    assert not at.exception
    config = {
        "model": "mlp",
        "layers": 4,
        "width": 256,
        "batch": 64,
        "accum": 1,
        "steps": 2,
        "timing_steps": 2,
        "device": "cpu",
    }
    single = estimate(ExperimentConfig.from_dict(config), device_type="cpu")["peak_bytes"]
    capacity = single * 2 // 3 // 2**20  # MiB: one device does not hold it
    fit = what_fits(config, capacity * 2**20, device_type="cpu")
    assert fit and fit["world_size"] >= 2
    text = _find(at, capacity)
    names = {"ddp": "DDP", "ddp_zero1": "ZeRO-1", "fsdp2_zero2": "ZeRO-2", "fsdp2_zero3": "ZeRO-3"}
    assert f"{fit['world_size']} × " in text and names[fit["strategy"]] in text, text
    # A budget one device meets says so; one nothing meets says that, with why.
    assert "One device fits" in _find(at, 100_000)
    assert "Nothing up to 8 devices" in _find(at, 1)
    assert not at.exception


def test_host_memory_is_a_bar_of_its_own_never_added_to_the_device():
    """CPU offload: the rank's host memory is drawn apart (paler), the device bar holds only the device's bytes,
    and a recording that summed both into one breakdown is not drawn at all."""
    from app.charts import categories

    device = {"communication": 12 * 2**20, "temporaries": 4 * 2**20}
    host = {"parameters": 16 * 2**20, "gradients": 16 * 2**20, "optimizer_state": 32 * 2**20}
    offload = {"strategy": "fsdp2_offload", "breakdown": device, "host_breakdown": host}
    df = categories.frame([("ZeRO-3 + offload", *categories.rank_breakdowns(offload, offload))])
    bars = df.groupby("label")["mib"].sum().to_dict()
    assert bars == {"ZeRO-3 + offload": 16.0, "ZeRO-3 + offload: host memory": 64.0}
    assert df.groupby("label")["memory"].nunique().max() == 1 and df["memory"].nunique() == 2
    spec = categories.chart(df).to_dict()
    assert spec["layer"][0]["encoding"]["opacity"]["scale"]["range"] == [1.0, 0.45]  # the bars; names above them
    legacy = {"strategy": "fsdp2_offload", "breakdown": {**device, **host}}
    assert categories.rank_breakdowns(legacy, legacy) == (None, None)
    ddp = {"strategy": "ddp", "breakdown": device}  # a CPU (gloo) rank: host memory is its device memory
    assert categories.rank_breakdowns(ddp, ddp) == (device, None)
    counters = {**ddp, "host_breakdown": {"optimizer_state": 17 * 4}}  # Adam's step counters of a GPU rank
    assert categories.rank_breakdowns(counters, counters) == (device, None)


def test_the_offload_recording_that_summed_host_and_device_shows_the_estimates_split_and_says_what_it_awaits():
    """Until CPU offload is re-recorded on 2 GPUs with host memory apart, the comparison draws the estimate's split
    for it (labelled so), says that the measured bars await that recording, and checks no sentence against the
    summed breakdown; what the recording has right (its device peak) is still there."""
    import pytest

    from app import backend
    from app.charts import categories
    from app.features.data_parallel_result import _estimated_split
    from course import expectations
    from experiments.core.recorded import load_recorded

    recorded = load_recorded("multigpu-h200x2-fsdp2_offload")
    if not categories.awaits_split(recorded):
        pytest.skip("re-recorded with host memory apart: the page draws the measured bars")
    device, host = _estimated_split(recorded)
    assert device == recorded["estimate"]["categories"] and device["parameters"] == device["optimizer_state"] == 0
    # The host part is what a ZeRO-3 rank keeps on its device after a step (the same shards), as recorded.
    zero3 = load_recorded("multigpu-h200x2-fsdp2_zero3")["ranks"][0]["breakdown_steady"]
    assert host == {k: zero3[k] for k in ("parameters", "gradients", "optimizer_state")}
    assert host == backend.offload_host_categories(recorded["distributed"])
    check = {"check": "value", "metric": "category_mib", "category": "parameters", "run": "offload", "max": 0.01}
    assert expectations.evaluate_one(check, {"offload": recorded})["holds"] is False  # the summed breakdown
    assert expectations.evaluate_one(check, {"offload": categories.as_measured(recorded)})["holds"] is None
    assert categories.as_measured(recorded)["peak_bytes"] == recorded["peak_bytes"]

    at = open_page(NS)
    assert not at.exception, [e.value for e in at.exception]
    assert any(
        c.value.startswith(
            "The CPU-offload recording counted host and device memory together: its measured "
            "bars await a recording on 2 GPUs"
        )
        for c in at.caption
    )
    notes = [m.value for m in at.markdown if "Under CPU offload (GPUs only)" in m.value]
    assert notes and not [m.value for m in at.markdown if "does not show what the lesson's note describes" in m.value]


def test_what_fits_starts_at_the_workers_device_and_names_communication_buffers_when_they_dominate():
    """On a CPU the capacity starts at the worker's memory, not at an 80 GiB GPU; at 20 MiB the lesson's model fits
    nowhere, and where a rank's largest part is its communication buffers, the page says so instead of advising a
    smaller batch or checkpointing (which cannot help)."""
    from app import backend
    from course.units import fmt_bytes
    from experiments.core.config import DistributedConfig
    from experiments.distributed.estimate import estimate_sharded

    at = open_page(NS, "en")
    info = backend.device_info()
    assert at.number_input(key=f"{NS}_capacity").value == min(int(backend.BUDGET_MB[1]), info["total_bytes"] // 2**20)
    said = _find(at, 20)
    cfg = ExperimentConfig.from_dict({**at.session_state["multigpu.fits_result"][0][0]})
    est = estimate_sharded(DistributedConfig(cfg, strategy="fsdp2_zero3", world_size=8), "cpu", None)
    cats = est["categories"]
    assert max(cats, key=cats.get) == "communication"  # the premise, by the engine's own estimate
    assert "communication buffers" in said and fmt_bytes(cats["communication"]) in said, said
    assert "lower the per-rank batch" not in said
