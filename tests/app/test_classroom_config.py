"""Served to a class: no developer toolbar (no Deploy button), no usage statistics, and nothing fetched from the
internet (a classroom may be offline): the favicon ships with the app."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.ui import layout

ROOT = Path(__file__).resolve().parents[2]


def test_streamlit_config_is_for_a_class():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["client"]["toolbarMode"] == "minimal"
    assert config["browser"]["gatherUsageStats"] is False


def test_the_favicon_is_a_shipped_file():
    assert layout.FAVICON.is_file() and layout.FAVICON.is_relative_to(ROOT)
    assert layout.FAVICON.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_broken_limits_file_tells_the_terminal_and_never_shows_a_learner_its_path(tmp_path, monkeypatch, capsys):
    from experiments.core import limits
    from tests.app.pages import open_page

    bad = tmp_path / "limits.json"
    bad.write_text('{"max_peak_gb": 3}')
    monkeypatch.setenv("GPU_MEMORY_LAB_LIMITS", str(bad))
    monkeypatch.setattr(limits, "_CHECKED", [])
    at = open_page("home", "en")
    shown = " ".join(e.value for e in at.error)
    assert "not ready" in shown and str(tmp_path) not in shown and "max_peak_gb" not in shown
    assert not at.exception
    err = capsys.readouterr().err
    assert "unknown key 'max_peak_gb'" in err and str(bad) in err and "The server stops" in err


def test_with_a_class_limit_the_estimate_box_gives_the_limits_verdict_alone(tmp_path, monkeypatch):
    """One verdict, the one that decides: an estimate above the server's limit per run never says "Fits"."""
    from experiments.core import limits
    from tests.app.pages import open_page

    path = tmp_path / "limits.json"
    monkeypatch.setenv("GPU_MEMORY_LAB_LIMITS", str(path))
    over = "Not run: its estimated peak is above this server's limit of {} per run"
    # Both sides of the limit: under a limit of 1 KiB the box refuses; under 1000 GiB it judges the free memory.
    for cap, refused in ((0.000001, True), (1000, False)):
        path.write_text(f'{{"max_peak_gib": {cap}}}')
        monkeypatch.setattr(limits, "_CHECKED", [])
        at = open_page("monitoring", "en")
        assert not at.exception
        said = [w.value for w in at.warning if w.value.startswith(over.format(f"{cap:g} GiB"))]
        assert len(said) == int(refused), [w.value for w in at.warning]
        assert any(s.value == "Fits into the available memory." for s in at.success) is not refused


@pytest.mark.parametrize(
    "env, said",
    [
        ({"GPU_MEMORY_LAB_MAX_JOB_SECONDS": "abc"}, "GPU_MEMORY_LAB_MAX_JOB_SECONDS=abc: max_job_seconds"),
        ({"GPU_MEMORY_LAB_LIMITS": "null"}, "not one JSON object"),
    ],
)
def test_a_bad_job_time_setting_or_a_file_of_no_keys_stops_the_server_like_a_bad_key(
    tmp_path, monkeypatch, capsys, env, said
):
    """The job time setting without a file, and a file holding JSON's null, showed a learner a traceback with the
    server's paths, and the server went on serving."""
    from experiments.core import limits
    from tests.app.pages import open_page

    monkeypatch.delenv("GPU_MEMORY_LAB_LIMITS", raising=False)
    for key, value in env.items():
        if key == "GPU_MEMORY_LAB_LIMITS":
            (tmp_path / "limits.json").write_text(value)
            value = str(tmp_path / "limits.json")
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(limits, "_CHECKED", [])
    at = open_page("home", "en")
    assert not at.exception
    shown = " ".join(e.value for e in at.error)
    assert "not ready" in shown and str(tmp_path) not in shown
    err = capsys.readouterr().err
    assert said in err and "The server stops" in err, err


def test_the_operator_checks_the_limits_file_before_the_server_starts(tmp_path, monkeypatch, capsys):
    """`python -m experiments limits` (docs/operators.md's start command runs it first): the limits in effect, or a
    broken file in one line with exit status 2, so that `&& streamlit run` never starts a class with it."""
    from experiments import cli

    path = tmp_path / "limits.json"
    path.write_text('{"max_peak_gib": 40, "max_queue": 50}')
    monkeypatch.setenv("GPU_MEMORY_LAB_LIMITS", str(path))
    assert cli.main(["limits"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"limits: {path}" and "  max_peak_gib           40" in out and "  max_queue              50" in out
    path.write_text('{"max_peak_gb": 40}')
    assert cli.main(["limits"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown key 'max_peak_gb'" in err
