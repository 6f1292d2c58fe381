"""The UI strings as data (app/i18n/strings.json, lessons/<id>/strings.json): every key in both languages, defined
once, and every key the code names defined somewhere. Each check is also run on files made wrong on purpose, so a
check that cannot fail is noticed."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from app import i18n
from course import catalog, content
from course.grading import ex1, ex3
from experiments.core.config import BATCH_MODES, CHOICES, STRATEGIES, TORCH_OPTIMIZERS, ExperimentConfig
from experiments.core.vocabulary import CATEGORIES, PHASES
from experiments.labs.fragmentation import ALLOCATORS

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted([*(ROOT / "app").rglob("*.py"), *(ROOT / "course").rglob("*.py")])


def one_language_only(paths) -> list[str]:
    """Keys whose entry is not exactly a non-empty English and a non-empty Chinese string."""
    bad = []
    for path in paths:
        for key, entry in i18n.entries(path):
            entry = dict(entry)
            if set(entry) != {"en", "zh"} or not all(isinstance(v, str) and v.strip() for v in entry.values()):
                bad.append(f"{path.name}:{key}")
    return bad


def defined_twice(paths) -> list[str]:
    """Keys stated more than once, in one file or in two."""
    seen: dict[str, Path] = {}
    twice = []
    for path in paths:
        for key, _ in i18n.entries(path):
            if key in seen:
                twice.append(f"{key} ({seen[key].parent.name}/{seen[key].name} and {path.parent.name}/{path.name})")
            seen.setdefault(key, path)
    return twice


def named_keys(source: str) -> tuple[set[str], list[str]]:
    """(keys named literally, patterns of keys built at run time) by the first argument of every t(...) and
    message(...) call; a pattern is the constant parts of an f-string or of a "prefix." + x expression."""
    literal, patterns = set(), []
    for node in ast.walk(ast.parse(source)):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("t", "message")
            and node.args
        ):
            continue
        parts = list(ast.walk(node.args[0]))
        pieces = {id(v) for p in parts if isinstance(p, ast.JoinedStr) for v in p.values}
        for part in parts:
            if id(part) in pieces:
                continue
            if isinstance(part, ast.Constant) and isinstance(part.value, str) and "." in part.value:
                literal.add(part.value)
            elif isinstance(part, ast.JoinedStr):
                patterns.append(
                    "".join(re.escape(v.value) if isinstance(v, ast.Constant) else ".+" for v in part.values)
                )
            elif (
                isinstance(part, ast.BinOp) and isinstance(part.left, ast.Constant) and isinstance(part.left.value, str)
            ):
                patterns.append(re.escape(part.left.value) + ".+")
    # A constant that is the start of a built key ("opt.measured." + metric) is a prefix, not a key.
    return {k for k in literal if not k.endswith(".")}, patterns


def undefined(sources: dict[str, str], strings: dict) -> list[str]:
    missing = []
    for name, source in sources.items():
        literal, patterns = named_keys(source)
        missing += [f"{name}: {k}" for k in sorted(literal - set(strings))]
        missing += [f"{name}: no key matches {p}" for p in patterns if not any(re.fullmatch(p, k) for k in strings)]
    return missing


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------- the shipped files


def test_the_lessons_own_strings_are_loaded_beside_the_chrome():
    names = [p.relative_to(ROOT).as_posix() for p in i18n.files()]
    assert names[0] == "app/i18n/strings.json"
    assert {"lessons/exercise1/strings.json", "lessons/multigpu/strings.json"} <= set(names)
    on_disk = {p.relative_to(ROOT).as_posix() for p in (ROOT / "lessons").glob("*/strings.json")}
    assert on_disk <= set(names), "a lesson strings file that is not a page of the course is never read"
    assert i18n.STRINGS["ex1.title"] == tuple(
        dict(dict(i18n.entries(ROOT / "lessons/exercise1/strings.json"))["ex1.title"])[lang] for lang in ("en", "zh")
    )


def test_every_key_is_in_both_languages():
    assert not one_language_only(i18n.files())


def test_no_key_is_defined_twice():
    assert not defined_twice(i18n.files())


def test_every_key_the_code_names_is_defined():
    assert not undefined({p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8") for p in SOURCES}, i18n.STRINGS)


def test_every_config_rule_the_engine_enumerates_is_worded():
    """The sandbox words a broken rule by its code (config.err.<code>); a code without a key falls back to the
    engine's English message, so every code the engine lists has a key in both languages."""
    from experiments.core.errors import ERROR_CODES

    assert not [c for c in ERROR_CODES if f"config.err.{c}" not in i18n.STRINGS]


def test_every_key_built_from_the_engines_vocabulary_is_defined():
    """Keys made at run time from a name (a field, an option, a category, a strategy...): every name has one."""
    families = {
        "field.{}": ExperimentConfig().to_dict(),
        "cat.{}": (*CATEGORIES, "communication"),
        "phase.{}": PHASES,
        "multigpu.opt.{}": STRATEGIES,
        "multigpu.mode.{}": BATCH_MODES,
        "frag.allocator.{}": ALLOCATORS,
        "jobs.state.{}": ("queued", "running", "done", "error", "cancelled"),
        "ex1.field.{}": (*ex1.settings(content.meta("exercise1")).categories, "phase"),
        "ex3.fix.{}": tuple(ex3.settings(content.meta("exercise3")).fixes),
        "ex1.why.state.{}": (*TORCH_OPTIMIZERS, "other"),  # exercise 1 offers torch's optimizers
        "ex1.why.phase_{}": ex1.STEP_PHASES,
        "ex3.why.{}": ("keep_loss", "keep_detach", "cache_keep", "cache_detach"),
        "ex2.best_known.{}": ("yours", "measured"),
        "ex2.ranked_by.{}": ("time", "work"),
        "grade.progress.{}": catalog.group("exercises"),
        "page.{}": catalog.PAGE_IDS,
        "nav.{}": catalog.GROUPS,
    }
    missing = [
        pattern.format(name)
        for pattern, names in families.items()
        for name in names
        if pattern.format(name) not in i18n.STRINGS
    ]
    missing += [f"opt.{f}.{v}" for f, values in CHOICES.items() for v in values if f"opt.{f}.{v}" not in i18n.STRINGS]
    assert not missing


# ---------------------------------------------------------------------------------------------- the checks can fail


def test_the_checks_find_what_is_wrong(tmp_path):
    good = {"a.key": {"en": "A", "zh": "甲"}}
    one = _write(tmp_path, "one.json", json.dumps({"a.key": {"en": "A"}, "b.key": {"en": "B", "zh": " "}}))
    assert one_language_only([one]) == ["one.json:a.key", "one.json:b.key"]
    same_file = _write(tmp_path, "same.json", '{"a.key": {"en": "A", "zh": "甲"}, "a.key": {"en": "B", "zh": "乙"}}')
    assert defined_twice([same_file]) == ["a.key (" + tmp_path.name + "/same.json and " + tmp_path.name + "/same.json)"]
    other = _write(tmp_path, "other.json", json.dumps(good))
    first = _write(tmp_path, "first.json", json.dumps(good))
    assert len(defined_twice([first, other])) == 1 and not defined_twice([first])
    code = 't("a.key")\nt("b.missing" if x else "a.key")\nmessage("c.missing", n=1)\nt("x.y." + name)\nt(f"a.{k}")\n'
    assert undefined({"m.py": code}, good) == ["m.py: b.missing", "m.py: c.missing", "m.py: no key matches x\\.y\\..+"]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_t_formats_and_falls_back(lang, monkeypatch):
    monkeypatch.setattr(i18n, "lang", lambda: lang)
    assert i18n.t("estimate.not_predicted", n=3) == i18n.STRINGS["estimate.not_predicted"][lang == "zh"].format(n=3)
    assert i18n.t("no.such.key") == "no.such.key" and i18n.t("no.such.key", default="x {n}", n=1) == "x 1"
