"""The command line as a newcomer meets it: every bad argument is one line naming the field and what it allows, exit
status 2, before torch is imported; every subcommand says what it does and every number its range and default; a flag
that means nothing without another is refused, not dropped; text is a person's summary, --json one object."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from experiments import cli
from experiments.core.limits import ENV
from tests.engine.cli_output import said
from tests.engine.test_cli_worker import _cli

ROOT = Path(__file__).resolve().parents[2]
SUBCOMMANDS = ("run", "distributed", "estimate", "fits", "limits", "models", "guard", "leak")


# (arguments, the field the line names, what the line must say it allows)
BAD = [
    (["run", "--layers", "2.5"], "layers", "[1, 128]"),
    (["run", "--batch", "nan"], "batch", "[1, 65536]"),
    (["run", "--budget-mb", "abc"], "budget_mb", "[1, 10000000]"),
    (["run", "--world-size", "0"], "world_size", "[1, 8]"),
    (["run", "--world-size", "two"], "world_size", "[1, 8]"),
    (["distributed", "--world-size", "9"], "world_size", "[1, 8]"),
    (["distributed", "--strategy", "zero9"], "strategy", "fsdp2_zero3"),
    (["distributed", "--batch-mode", "global", "--batch", "7"], "batch", "divisible by world_size 2"),
    (["run", "--batch-mode", "global"], "batch_mode", "--world-size"),
    (["run", "--no-update-check"], "check_update", "--world-size"),
    (["leak", "--scenario", "fixed", "--steps", "0"], "steps", "[1, 200]"),
    (["leak", "--scenario", "fixed", "--steps", "2.5"], "steps", "[1, 200]"),
    (["leak", "--scenario", "fixed", "--width", "-1"], "width", "[8, 8192]"),
    (["leak", "--scenario", "fixed", "--device", "tpu"], "device", "auto, cuda, cpu"),
    (["fits", "--capacity-gib", "24", "--across", "0"], "across", "[1, 8]"),
    (["fits", "--capacity-gib", "24", "--max-batch", "0"], "max_batch", "[1, 65536]"),
    (["fits", "--capacity-gib", "24", "--max-batch", "-5"], "max_batch", "[1, 65536]"),
    (["fits", "--capacity-gib", "abc"], "capacity_gib", "[0.001, 100000]"),
    (["fits", "--capacity-gib", "inf"], "capacity_gib", "[0.001, 100000]"),
    (["fits", "--capacity-gib", "24", "--methods"], "methods", "--model-preset"),
    (["estimate", "--model-preset", "nope"], "model_preset", "gpt2"),
    (["estimate", "--model-preset", "模型"], "model_preset", "gpt2"),
    (["estimate", "--model-preset", "gpt2:tiny"], "model_preset", "gpt2"),
    (["estimate", "--quant-type", "fp4"], "quant_type", "--finetune qlora"),
    (["estimate", "--model-preset", "gpt2", "--no-double-quant"], "double_quant", "--finetune qlora"),
    (["estimate", "--inputs", "x:float[B,4]"], "inputs", "--import"),
    (["estimate", "--loss", "ce"], "loss", "--import"),
    (["estimate", "--import", "nocolon"], "import", "package.module:factory"),
    (["estimate", "--import", "a:b", "--loss", "nope"], "loss", "model, ce, mse, mean"),
    (["estimate", "--model-type", "lama"], "model_source", "close matches: llama"),
    (["fits", "--model-type", "no-such-type", "--capacity-gib", "24"], "model_source", "python -m experiments models"),
]
if importlib.util.find_spec("torchvision") is None:  # CI's environment has none; a newcomer's may
    BAD.append((["estimate", "--torchvision", "resnet18"], "model_source", "torchvision is not installed"))


@pytest.mark.parametrize("args, field, allowed", BAD, ids=[" ".join(a) for a, _, _ in BAD])
def test_a_bad_argument_is_one_line_naming_the_field_and_what_it_allows(capsys, args, field, allowed):
    for extra in ([], ["--json"]):  # the same refusal and status with --json
        code, out, err = _cli(capsys, *args, *extra)
        assert code == 2 and out == "" and err.count("\n") == 1, (code, err)
        assert err.startswith(f"error: {field}: ") and allowed in err, err


def test_bad_arguments_answer_before_torch_is_imported():
    """torch's import alone takes seconds: the refusals come first (a data-parallel spread, leak's numbers, a preset's
    name were checked only after it)."""
    probe = (
        "import sys\nfrom experiments import cli\ntry:\n    code = cli.main(sys.argv[1:])\nexcept SystemExit as e:\n"
        "    code = e.code\nprint('torch imported' if 'torch' in sys.modules else 'no torch', code, file=sys.stderr)"
    )
    cases = [a for a, _, _ in BAD] + [[name, "--help"] for name in SUBCOMMANDS]
    cases += [["models", "--nope"]]
    for args in cases:
        r = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, cwd=ROOT)
        last = r.stderr.strip().splitlines()[-1]
        assert last.startswith("no torch"), (args, r.stderr[-400:])


def test_every_subcommand_says_what_it_does_and_every_option_has_help(capsys):
    parser = cli.build_parser()
    subs = next(a for a in parser._actions if a.dest == "command").choices
    assert set(subs) == set(SUBCOMMANDS)
    for name, sub in subs.items():
        assert sub.description and len(sub.description) > 20, name
        for action in sub._actions:
            assert action.help, (name, action.option_strings)


@pytest.mark.parametrize("name", ["run", "distributed", "estimate", "fits", "guard", "leak"])
def test_every_numeric_option_shows_its_range_and_default(capsys, name):
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[name]
    numeric = ("--world-size", "--budget-mb", "--max-batch", "--across", "--capacity-gib", "--steps", "--batch")
    for action in sub._actions:
        flag = next((f for f in action.option_strings if f.startswith("--")), "")
        if flag in numeric or (action.help or "").startswith("an integer"):
            assert "[" in action.help or "-" in action.help.split(";")[0], (name, flag, action.help)
            assert "default" in action.help, (name, flag, action.help)


def test_fits_help_names_the_flag_it_has(capsys):
    """It said "with --world-size the fewest GPUs"; fits has no --world-size, its flag is --across."""
    code, out, _ = _cli(capsys, "--help")
    assert code == 0 and "--world-size the fewest" not in " ".join(out.split())
    code, out, _ = _cli(capsys, "fits", "--help")
    assert code == 0 and "--across the fewest GPUs" in " ".join(out.split())


def test_fits_prints_a_table_for_a_person_and_one_object_with_json(capsys):
    args = ("fits", "--capacity-gib", "1", "--layers", "2", "--width", "64", "--batch", "8", "--max-batch", "64")
    code, out, err = _cli(capsys, *args)
    assert code == 0, err
    assert not out.lstrip().startswith("{") and "largest batch" in out and "cheapest for batch 8" in out, out
    code, out, _ = _cli(capsys, *args, "--json")
    r = json.loads(out)
    assert code == 0 and out.count("\n") == 1 and r["batch"] == 8 and r["grid"]


def test_models_lists_as_text_and_as_json(capsys):
    from experiments.core.model_sources import presets

    code, out, _ = _cli(capsys, "models", "--json")
    r = json.loads(out)
    assert code == 0 and list(r["presets"]) == list(presets()) and "gpt2" in r["model_types"]
    code, out, _ = _cli(capsys, "models")
    assert code == 0 and out.startswith("preset  llama3-8b")


def test_a_long_estimate_says_it_is_still_working(capsys):
    import io
    import time

    from experiments.cli_progress import Heartbeat

    stream = io.StringIO()
    with Heartbeat("estimating preset:gpt2", stream=stream, after=0.05, every=0.05):
        time.sleep(0.3)
    lines = stream.getvalue().splitlines()
    assert len(lines) >= 2 and all(line.startswith("estimating preset:gpt2: ") for line in lines), lines
    assert said(stream.getvalue()) == ""  # what the tests leave out of a command's stderr
    quiet = io.StringIO()
    with Heartbeat("estimating", stream=quiet, after=5):
        pass
    assert quiet.getvalue() == ""  # quick work prints nothing extra


@pytest.mark.parametrize(
    "text, said",
    [
        ('{"max_job_seconds": 300, "max_jobs": 3}', "unknown key 'max_jobs'"),
        ("null", "not one JSON object"),
        ('{"max_queue": 2.5}', "max_queue must be a positive whole number"),
        ('{"max_queue": null}', "max_queue must be a positive whole number"),
    ],
)
def test_a_broken_limits_file_is_one_line_naming_it_and_the_key(capsys, tmp_path, monkeypatch, text, said):
    path = tmp_path / "limits.json"
    path.write_text(text)
    monkeypatch.setenv(ENV, str(path))
    code, out, err = _cli(capsys, "run", "--device", "cpu", "--layers", "1", "--width", "8", "--batch", "2")
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith(f"error: {ENV}={path}: ") and said in err, err


def test_a_missing_limits_file_and_a_bad_job_time_setting_are_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, str(tmp_path / "missing.json"))
    code, _, err = _cli(capsys, "leak", "--scenario", "fixed", "--steps", "1")
    assert code == 2 and err.count("\n") == 1 and "missing.json: cannot read the limits file" in err, err
    monkeypatch.delenv(ENV)
    monkeypatch.setenv("GPU_MEMORY_LAB_MAX_JOB_SECONDS", "abc")
    code, _, err = _cli(capsys, "guard", "--layers", "1", "--width", "8", "--batch", "2")
    assert code == 2 and err.count("\n") == 1 and "GPU_MEMORY_LAB_MAX_JOB_SECONDS=abc: max_job_seconds" in err, err


def test_an_import_that_returns_no_module_names_the_import_flag(capsys):
    """It named a field "source", which no flag is called."""
    code, _, err = _cli(capsys, "estimate", "--import", "os:getcwd", "--inputs", "x:float[B,4]", "--device", "cpu")
    assert code == 2 and said(err) == "error: import: os:getcwd returned str, not an nn.Module\n", err


def test_the_search_across_gpus_says_it_is_still_working(capsys, monkeypatch):
    """`fits --across 8` was silent for 79 s after its table: the search across GPUs runs under a heartbeat."""
    import time

    from experiments import cli_models
    from experiments.cli_progress import Heartbeat
    from experiments.distributed import model_fits
    from tests.engine.test_cli_worker import _cli

    monkeypatch.setattr(model_fits, "what_fits", lambda *a, **k: {"rows": []})
    monkeypatch.setattr(model_fits, "fits_across", lambda *a: time.sleep(0.3) or {"gpus": 2})
    monkeypatch.setattr(cli_models, "Heartbeat", lambda label: Heartbeat(label, after=0.05, every=0.05))
    code, _, err = _cli(capsys, "fits", "--capacity-gib", "24", "--across", "2", "--json", progress=True)
    assert code == 0 and "searching across 2 GPUs: 0 s" in err, err
