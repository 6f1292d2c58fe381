"""The "Your model" page opens the JSON a command-line run wrote: each kind (estimate, what fits, a run, cannot be
predicted) is shown with the page's own views, and a file that is not such a result is refused naming the field."""

from __future__ import annotations

import json

import pytest

from course import cli_result
from experiments.core.config import ExperimentConfig
from experiments.core.units import fmt_bytes
from experiments.distributed.model_fits import what_fits
from experiments.estimate.estimator import estimate_or_refusal
from tests.app.pages import open_page

CFG = ExperimentConfig.from_dict(
    {
        "model_source": "preset:gpt2:tiny",
        "batch": 2,
        "seq_len": 16,
        "precision": "amp_bf16",
        "optimizer": "adamw",
        "optimizer_impl": "fused",
        "device": "cpu",
        "steps": 2,
        "timing_steps": 0,
    }
)


@pytest.fixture(scope="module")
def written() -> dict[str, bytes]:
    """What `estimate --json` and `fits --json` write (the CLI dumps these dicts)."""
    est = estimate_or_refusal(CFG, device_type="cuda")
    fits = what_fits(CFG, 2 * 2**30, "cuda", max_batch=64)  # past the 0.82 GiB the process holds outside the allocator
    return {"estimate": json.dumps(est).encode(), "fits": json.dumps(fits).encode(), "est": est, "fits_r": fits}


def test_each_kind_reads_as_what_it_is(written):
    assert cli_result.read(written["estimate"])[0] == "estimate"
    assert cli_result.read(written["fits"])[0] == "fits"
    cannot = {"predicted": False, "cannot_predict": {"message": "aten.nonzero in model.roi: data-dependent shape"}}
    assert cli_result.read(json.dumps(cannot).encode())[0] == "cannot_predict"


@pytest.mark.parametrize(
    "change,field",
    [
        (lambda d: d.update(peak_bytes="12"), "peak_bytes"),
        (lambda d: d.update(peak_bytes=-1), "peak_bytes"),
        (lambda d: d["categories"].update(evil=1), "categories"),
        (lambda d: d["phases"][0].update(phase="<script>"), "phases[0].phase"),
        (lambda d: d.update(peak_phase="x"), "peak_phase"),
        (lambda d: d.pop("categories"), "categories"),
    ],
)
def test_a_tampered_estimate_is_refused_naming_the_field(written, change, field):
    data = json.loads(written["estimate"])
    change(data)
    with pytest.raises(cli_result.NotAResult, match=rf"^{field.replace('[', '.').replace(']', '.')}"):
        cli_result.read(json.dumps(data).encode())


@pytest.mark.parametrize(
    "raw,why",
    [(b"not json", "not JSON"), (b"[1, 2]", "a JSON object"), (b"{}", "not the JSON"), (b" " * (5 * 2**20), "bytes")],
)
def test_what_is_not_a_result_is_refused(raw, why):
    with pytest.raises(cli_result.NotAResult, match=why):
        cli_result.read(raw)


def test_a_fits_row_with_an_unknown_choice_is_refused(written):
    data = json.loads(written["fits"])
    data["grid"][0]["precision"] = "fp8"
    with pytest.raises(cli_result.NotAResult, match=r"grid\[0\]\.precision: got 'fp8'; allowed"):
        cli_result.read(json.dumps(data).encode())


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_page_shows_an_opened_estimate_and_what_fits_and_refuses_a_bad_file(written, lang):
    at = open_page("yourmodel", lang)
    at.file_uploader(key="ym.open").upload("result.json", written["estimate"], "application/json").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    shown = "\n".join(m.value for m in at.markdown)
    assert fmt_bytes(written["est"]["peak_bytes"]) in shown
    assert "preset:gpt2:tiny" in "\n".join(x.value for x in at.text)
    at.file_uploader(key="ym.open").upload("fits.json", written["fits"], "application/json").run()
    # the opened grid, one row per combination with its largest batch (a static table, which wraps)
    largest = [str(row["largest_batch"]) for row in written["fits_r"]["grid"]]
    assert not at.exception
    assert any(list(t.value[c].astype(str)) == largest for t in at.table for c in t.value.columns)
    at.file_uploader(key="ym.open").upload("bad.json", b'{"phases": "x"}', "application/json").run()
    assert not at.exception and any("peak_bytes: expected int" in e.value for e in at.error)


MEASURED = {
    "device": "NVIDIA H200",
    "emulated": True,
    "default": {
        "estimate": 9,
        "largest_batch": 8,
        "trials": [{"batch": 9, "ran": False}, {"batch": 8, "ran": True}, {"batch": 7, "ran": True}],
    },
    "expandable": {"estimate": 12, "largest_batch": None, "trials": [{"batch": 12, "ran": None, "error": "boom"}]},
}


@pytest.mark.parametrize(
    "change,field",
    [
        (lambda m: m.update(emulated="yes"), "measured.emulated"),
        (lambda m: m["default"]["trials"][0].update(ran="no"), r"measured.default.trials\[0\].ran"),
        (lambda m: m["default"].pop("estimate"), "measured.default.estimate"),
    ],
)
def test_a_tampered_measurement_is_refused_naming_the_field(written, change, field):
    data = json.loads(written["fits"])
    data["measured"] = json.loads(json.dumps(MEASURED))
    change(data["measured"])
    with pytest.raises(cli_result.NotAResult, match=f"^{field}"):
        cli_result.read(json.dumps(data).encode())


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_an_opened_fits_result_with_trials_shows_the_measured_largest_batch_beside_the_estimate(written, lang):
    data = json.loads(written["fits"]) | {"measured": MEASURED}
    at = open_page("yourmodel", lang)
    at.file_uploader(key="ym.open").upload("fits.json", json.dumps(data).encode(), "application/json").run()
    assert not at.exception
    said = [s.value for s in at.success]
    measured = {
        "en": "the largest batch that ran is **8** (the estimate: 9). Ran at 7, 8; did not run at 9 (out of memory,",
        "zh": "能跑通的最大批大小是 **8**（估算：9）。跑通的批大小：7、8；没有跑通的批大小：9（显存不足，",
    }[lang]
    assert any(measured in s and "NVIDIA H200" in s for s in said), said
    assert any("NVIDIA H200" in w.value for w in at.warning)  # the expandable search stopped on a failed trial
    assert "boom" in "\n".join(x.value for x in at.text)
