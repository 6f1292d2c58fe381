"""The multi-GPU page's "What fits": what it says is what experiments.sharding.what_fits finds."""

from __future__ import annotations

from conftest import open_page, small_config

from experiments.config import ExperimentConfig
from experiments.estimator import estimate
from experiments.sharding import what_fits

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
    config = {"model": "mlp", "layers": 4, "width": 256, "batch": 64, "accum": 1, "steps": 2, "timing_steps": 2,
              "device": "cpu"}
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
