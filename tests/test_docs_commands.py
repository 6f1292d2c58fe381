"""The commands a learner or an operator copies from README and the guides name the project's environment: a bare
`python` or `streamlit` is the system's, which README itself says has no torch."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUIDES = ("README.md", "docs/operators.md", "docs/own-models.md")
# A command word at the start of a line or a code span, not a word in a sentence ("pip takes the CUDA build").
COMMAND = re.compile(r"(?:^|`)[ \t]*(?:\S+=\S+[ \t]+)*(python3?|streamlit|pip|pytest)[ \t]+(\S+)", re.M)


def bare_commands(text: str) -> list[str]:
    found = []
    for m in COMMAND.finditer(text):
        word, arg = m.groups()
        if word == "python3" and arg == "-m" and text[m.end() :].lstrip().startswith("venv"):
            continue  # the one system python a setup needs: it makes the environment
        found.append(f"{word} {arg}")
    return found


@pytest.mark.parametrize("name", GUIDES)
def test_every_command_in_the_guides_runs_the_projects_environment(name):
    assert bare_commands((ROOT / name).read_text(encoding="utf-8")) == []


def test_the_check_sees_a_bare_command_and_lets_the_environments_through():
    assert bare_commands("```\npython -m experiments fits\n```") == ["python -m"]
    assert bare_commands("run `streamlit run app/main.py` now") == ["streamlit run"]
    assert bare_commands("X=1 python benchmarks/a.py") == ["python benchmarks/a.py"]
    assert bare_commands("`.venv/bin/python -m experiments` and `python3 -m venv .venv`") == []
    assert bare_commands("on a GPU machine pip takes the CUDA build") == []
