import pytest

from experiments.core.config import ConfigError, ExperimentConfig


@pytest.mark.parametrize(
    "changes, field, fragment",
    [
        ({"batch": 0}, "batch", "[1, 65536]"),
        ({"batch": 30, "accum": 4}, "batch", "divisible by accum 4"),
        ({"precision": "fp8"}, "precision", "amp_bf16"),
        ({"model": "rnn"}, "model", "transformer"),
        ({"steps": 1}, "steps", "[2, 50]"),
        ({"layers": 3.5}, "layers", "integer"),
        ({"model": "transformer", "width": 100, "heads": 8}, "heads", "divisible"),
        ({"optimizer_impl": "fast"}, "optimizer_impl", "fused"),
        ({"budget_mb": 0}, "budget_mb", "[1, 10000000]"),
        ({"zero_grad_to_none": "maybe"}, "zero_grad_to_none", "true or false"),
    ],
)
def test_bad_values_name_the_field_and_the_allowed_range(changes, field, fragment):
    with pytest.raises(ConfigError) as info:
        ExperimentConfig.from_dict(changes)
    assert info.value.field == field
    assert fragment in str(info.value)
    assert str(info.value).startswith(f"{field}:")


def test_segments_longer_than_the_model_run_as_one_segment():
    """The model clamps a segment to the layers there are: such a value runs, so it is accepted."""
    import torch

    from experiments.measure.run import run_experiment

    base = {
        "layers": 4,
        "width": 32,
        "batch": 8,
        "checkpoint": "segments",
        "device": "cpu",
        "steps": 2,
        "timing_steps": 0,
    }
    cfg = ExperimentConfig.from_dict(dict(base, segments=9))
    assert cfg.segment_size == 4
    whole, longer = (run_experiment(ExperimentConfig.from_dict(dict(base, segments=n)), history=False) for n in (4, 9))
    assert longer["oom"] is None and longer["peak_bytes"] == whole["peak_bytes"]
    assert torch.allclose(torch.tensor(longer["losses"]), torch.tensor(whole["losses"]), rtol=0, atol=0)


@pytest.mark.parametrize("size", [8, 9, 17, 30, 37])
def test_any_cnn_image_size_in_range_runs_as_the_estimate_counts_it(size):
    """Sizes that are not a multiple of 4 run (max-pooling floors odd sizes); the sizes the estimator and the
    replay count (families.cnn_spatial_sizes) are the ones the model computes, and the CPU replay is exact."""
    import torch

    from experiments.core.families import cnn_spatial_sizes
    from experiments.estimate.estimator import estimate
    from experiments.measure.run import run_experiment
    from experiments.training.models import build_model, spec_for

    cfg = ExperimentConfig(
        model="cnn", layers=5, width=8, batch=2, image_size=size, device="cpu", steps=2, timing_steps=0
    )
    model = build_model(cfg, torch.device("cpu"))
    seen = []
    for block in model.blocks:
        block.register_forward_hook(lambda mod, inp, out: seen.append((inp[0].shape[-1], out.shape[-1])))
    model(**spec_for(cfg).batch(cfg, torch.device("cpu"), 1)[0])
    assert seen == cnn_spatial_sizes(cfg)
    result = run_experiment(cfg, history=False)
    assert result["oom"] is None
    assert estimate(cfg, device_type="cpu")["peak_bytes"] == result["peak_bytes"]


def test_query_param_strings_are_coerced():
    cfg = ExperimentConfig.from_dict({"batch": "64", "accum": "4", "inplace": "true", "budget_mb": "512"})
    assert (cfg.batch, cfg.accum, cfg.inplace, cfg.budget_mb, cfg.micro_batch) == (64, 4, True, 512.0, 16)


def test_unknown_field_is_refused():
    with pytest.raises(ConfigError) as info:
        ExperimentConfig.from_dict({"batchsize": 3})
    assert info.value.field == "batchsize"


def test_segment_size_defaults_to_sqrt_layers():
    assert ExperimentConfig(layers=16, checkpoint="segments").segment_size == 4
    assert ExperimentConfig(layers=16, checkpoint="segments", segments=2).segment_size == 2


def test_one_capacity_rule_budget_capped_by_the_device():
    from experiments.core.capacity import capacity

    assert capacity(None, 1000) == 1000
    assert capacity(None, 1000, cached_free_bytes=24) == 1024
    assert capacity(1, 10 * 2**20) == 2**20  # the budget, when the device has more
    assert capacity(64, 2**20) == 2**20  # the device, when the budget asks for more than there is
    assert capacity(2, None) == 2 * 2**20 and capacity(None, None) is None


def test_cpu_capacity_sees_a_containers_memory_limit(tmp_path, monkeypatch):
    from experiments.core import cgroup
    from experiments.measure import device as device_info

    (tmp_path / "cgroup.controllers").write_text("memory\n")  # cgroup v2 mounted at the root
    limit, usage = tmp_path / "memory.max", tmp_path / "memory.current"
    limit.write_text("1073741824\n")
    usage.write_text("268435456\n")
    proc = tmp_path / "proc_cgroup"
    proc.write_text("0::/\n")
    monkeypatch.setattr(cgroup, "ROOT", str(tmp_path))
    monkeypatch.setattr(cgroup, "PROC", str(proc))
    assert device_info.cgroup_available_bytes() == 768 * 2**20
    assert device_info.cpu_available_bytes() <= 768 * 2**20
    limit.write_text("max\n")  # no limit: the host's MemAvailable decides
    assert device_info.cgroup_available_bytes() is None


def test_operator_limits_file(tmp_path, monkeypatch):
    import json

    import pytest

    from experiments.core.limits import ENV, Limits, LimitsError, load

    path = tmp_path / "limits.json"
    path.write_text(json.dumps({"max_job_seconds": 30, "max_queue": 5, "max_peak_gib": 0.001}))
    monkeypatch.setenv(ENV, str(path))
    assert load() == Limits(max_job_seconds=30, max_queue=5, max_peak_gib=0.001)
    # The operator's cap refuses a run even when the learner forces it.
    from experiments.measure.fits import WouldNotFit
    from experiments.measure.run import run_experiment

    with pytest.raises(WouldNotFit, match="max_peak_gib") as refused:
        run_experiment(ExperimentConfig(device="cpu", layers=4, width=512, batch=64, force=True))
    assert refused.value.code == "max_peak_gib" and refused.value.params["limit_bytes"] == int(0.001 * 2**30)
    path.write_text(json.dumps({"max_queue": -1}))
    with pytest.raises(LimitsError, match="max_queue"):
        load()
    path.write_text(json.dumps({"max_gpus": 1}))
    with pytest.raises(LimitsError, match="unknown key 'max_gpus'"):
        load()


def test_every_rule_has_a_code_the_app_words_in_both_languages():
    """The app translates ConfigError by its code (config.err.<code>): it keeps no copy of the rules, and words no
    code the engine does not have."""
    from app.i18n import STRINGS
    from experiments.core.errors import ERROR_CODES

    worded = {k.removeprefix("config.err.") for k in STRINGS if k.startswith("config.err.")}
    assert worded and worded <= set(ERROR_CODES), worded - set(ERROR_CODES)

    cases = [
        ({"batch": 30, "accum": 4}, "batch_accum"),
        ({"model": "transformer", "width": 100, "heads": 3}, "heads_divide"),
        ({"model": "transformer", "width": 96, "heads": 16}, "head_dim"),
        ({"model": "cnn", "width": 600}, "cnn_width"),
        ({"model": "cnn", "width": 64, "layers": 17}, "cnn_layers"),
        ({"batch": 0}, "range"),
        ({"precision": "fp8"}, "choice"),
    ]
    for data, code in cases:
        with pytest.raises(ConfigError) as err:
            ExperimentConfig.from_dict(data)
        assert err.value.code == code, data
        en, zh = STRINGS["config.err." + code]
        assert en.format(**err.value.params) and zh.format(**err.value.params)


def test_a_single_field_from_a_link_is_checked_by_the_engine_rules():
    assert ExperimentConfig.field_value("batch", "64") == 64
    assert ExperimentConfig.field_value("accum", "3") == 3  # rules between fields wait for the whole config
    assert ExperimentConfig.field_value("budget_mb", "none") is None
    cases = (
        ("batch", "0", "range", {"value": 0, "lo": 1, "hi": 65536}),
        ("precision", "fp8", "choice", {"value": "fp8"}),
        ("layers", "x", "range", {"value": "x", "lo": 1, "hi": 128}),  # not an integer: the range it must be in
        ("inplace", "maybe", "choice", {"value": "maybe", "allowed": "true, false"}),
        ("budget_mb", "lots", "range", {"value": "lots", "lo": 1, "hi": 10_000_000}),
        ("batchsize", "3", "unknown", {"value": "batchsize"}),
    )
    for field, raw, code, params in cases:
        with pytest.raises(ConfigError) as err:
            ExperimentConfig.field_value(field, raw)
        assert err.value.field == field and err.value.code == code
        assert params.items() <= err.value.params.items(), (field, err.value.params)


def test_every_entry_point_refuses_an_unknown_device():
    from experiments.jobs.kinds import execute
    from experiments.measure.device import resolve_device

    for bad in ("foo", "", "cuda:0 "):
        with pytest.raises(ConfigError) as err:
            resolve_device(bad)
        assert err.value.field == "device" and "auto, cuda, cpu" in str(err.value)
        with pytest.raises(ConfigError, match="device"):
            execute("leak", {"scenario": "fixed", "steps": 2, "device": bad})
