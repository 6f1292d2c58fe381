"""Facts the engine states once (issue 16): every rule's error code, the byte units, the phases and categories, the
built-in families' parameter shapes. Static checks over experiments/ read its source (ast); each has a case that
shows it can fail."""

from __future__ import annotations

import ast
import random
from pathlib import Path

import pytest
import torch

from experiments.core import families
from experiments.core.config import ConfigError, ExperimentConfig
from experiments.core.errors import ERROR_CODES
from experiments.training.models import build_model

ENGINE = Path(__file__).resolve().parents[2] / "experiments"


def _sources():
    for path in sorted(ENGINE.rglob("*.py")):
        yield path, ast.parse(path.read_text(encoding="utf-8"))


def _error_calls(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "ConfigError":
            yield node


def _code_problems(tree, where: str) -> list[str]:
    """Each ConfigError(field, message, code, **params) of the engine names a code of ERROR_CODES with its params."""
    bad = []
    for call in _error_calls(tree):
        code = call.args[2] if len(call.args) > 2 else next((k.value for k in call.keywords if k.arg == "code"), None)
        if not isinstance(code, ast.Constant) or code.value not in ERROR_CODES:
            bad.append(f"{where}:{call.lineno} has no code of ERROR_CODES")
            continue
        params = {k.arg for k in call.keywords if k.arg != "code"}
        if params != set(ERROR_CODES[code.value]):
            bad.append(f"{where}:{call.lineno} {code.value} with {sorted(params)}, not {ERROR_CODES[code.value]}")
    return bad


def test_every_rule_of_the_engine_raises_a_code_with_its_parameters():
    bad = [p for path, tree in _sources() for p in _code_problems(tree, path.relative_to(ENGINE).as_posix())]
    assert not bad, bad
    calls = sum(1 for _, tree in _sources() for _ in _error_calls(tree))
    assert calls >= 40  # the check reads every raise (a parser that found none would pass)
    # The check fails for a raise without a code, and for one whose parameters are not its code's.
    assert _code_problems(ast.parse('ConfigError("x", "m")'), "t") and _code_problems(
        ast.parse('ConfigError("x", "m", "range", value=1)'), "t"
    )


def test_a_code_outside_error_codes_or_without_its_parameters_is_refused_at_once():
    with pytest.raises(TypeError, match="ERROR_CODES"):
        ConfigError("batch", "m", "no_such_rule")
    with pytest.raises(TypeError, match="ERROR_CODES"):
        ConfigError("batch", "m", "range", value=1)
    assert ConfigError("batch", "m", "range", value=1, lo=1, hi=2).params == {"value": 1, "lo": 1, "hi": 2}


def _unit_literals(tree) -> list[int]:
    """Lines where a binary unit is spelled out (2**10, 2**20, 2**30, 1024 * 1024)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.left, ast.Constant) and isinstance(node.right, ast.Constant):
            pair = (node.left.value, node.right.value)
            if (isinstance(node.op, ast.Pow) and pair in ((2, 10), (2, 20), (2, 30))) or (
                isinstance(node.op, ast.Mult) and pair == (1024, 1024)
            ):
                out.append(node.lineno)
    return out


def test_byte_units_come_from_core_units_only():
    found = {
        path.relative_to(ENGINE).as_posix(): lines
        for path, tree in _sources()
        if path.relative_to(ENGINE).as_posix() != "core/units.py" and (lines := _unit_literals(tree))
    }
    assert not found, f"spelled-out units (use experiments/core/units.py): {found}"
    assert _unit_literals(ast.parse("x = n / 2**20")) == [1]


VOCABULARY = {"PHASES", "CATEGORIES", "TENSOR_CATEGORIES", "CATEGORY_ORDER", "RANK_CATEGORIES", "STEP_PHASES"}


def test_phases_and_categories_are_named_in_the_vocabulary_only():
    defined = {}
    for path, tree in _sources():
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            for t in targets:
                if isinstance(t, ast.Name) and (t.id in VOCABULARY or t.id.endswith("_CATEGORIES")):
                    defined.setdefault(t.id, []).append(path.relative_to(ENGINE).as_posix())
    assert defined and all(where == ["core/vocabulary.py"] for where in defined.values()), defined


def _configs(n: int, seed: int):
    rng = random.Random(seed)
    for i in range(n):
        model = ("mlp", "cnn", "transformer")[i % 3]
        heads = rng.choice((1, 2, 4))
        width = {"mlp": rng.choice((8, 24, 96)), "cnn": rng.choice((8, 16)), "transformer": 8 * heads}[model]
        yield ExperimentConfig(
            model=model,
            layers=rng.randint(1, 5),
            width=width,
            heads=heads,
            precision=rng.choice(("fp32", "bf16")),
            image_size=16,
        )


def test_the_torch_free_parameter_shapes_are_the_built_models():
    for cfg in _configs(12, 3):
        model = build_model(cfg, torch.device("meta"))
        blocks, head = families.parameter_shapes(cfg)
        assert [[tuple(p.shape) for p in b.parameters()] for b in model.blocks] == blocks, cfg
        assert [tuple(p.shape) for p in model.head.parameters()] == head, cfg
        counted = sum(p.numel() * p.element_size() for p in model.parameters())
        assert families.parameter_bytes(cfg) == counted, cfg
