"""The torch releases the project declares, and CI running README's test command as a newcomer gets it."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]


def _requirement(text: str) -> str:
    return next(line.strip() for line in text.splitlines() if re.match(r"torch\b", line.strip()))


def test_one_torch_range_in_requirements_pyproject_and_readme():
    range_ = _requirement((ROOT / "requirements.txt").read_text())
    assert re.fullmatch(r"torch>=\d+\.\d+,<\d+\.\d+", range_), "a tested range has an upper bound"
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert range_ in deps
    assert f"`{range_}`" in (ROOT / "README.md").read_text()


def _readme_test_command() -> str:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)\n```", readme, re.S)
    return next(b for b in blocks if "pytest" in b)


def test_ci_runs_readmes_test_command_with_the_cpu_wheel_and_as_a_newcomer():
    script = (ROOT / ".ci" / "run").read_text()
    command = _readme_test_command()
    assert command in script
    newcomer = script[script.index("newcomer=") :]
    # The second run: in a copy, with neither the wheel folder nor the version constraint, the same function.
    assert "unset UV_FIND_LINKS UV_CONSTRAINT PIP_FIND_LINKS" in newcomer and "readme_tests" in newcomer
    assert script.count("readme_tests") >= 3  # defined, run here, run in the copy
