"""The architecture as rules on the import graph: no cycles, each layer imports only what is below it, small modules.

Every module under experiments/, course/ and app/ is parsed (`ast`, imports inside functions included, relative
imports resolved). `from package import name` counts as an import of the module package.name when there is one.
"""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("experiments", "course", "app")
MAX_MODULE_LINES = 400
MAX_PAGE_LINES = 60


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.lru_cache(maxsize=1)
def _modules() -> dict[str, Path]:
    found = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")) if (ROOT / pkg).is_dir() else []:
            if "__pycache__" not in path.parts:
                found[_module_name(path)] = path
    return found


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


@functools.lru_cache(maxsize=1)
def _imports() -> dict[str, set[str]]:
    """module -> every module name it imports (internal ones resolved to the module, external ones as written)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(node, name, path.name == "__init__.py")
                for a in node.names:
                    targets.add(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base)
        graph[name] = targets
    return graph


def _internal_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {m: {t for t in targets if t in modules and t != m} for m, targets in _imports().items()}


def _top(name: str) -> str:
    return name.split(".")[0]


def _cycles() -> list[list[str]]:
    """The import graph's strongly connected components of more than one module (Tarjan), each sorted."""
    graph = _internal_graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph) + 100))

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def _a_cycle(component: list[str]) -> list[str]:
    """One closed path through a component, for the message (a -> b -> ... -> a)."""
    graph, members = _internal_graph(), set(component)
    start = component[0]
    paths = [[start]]
    while paths:
        path = paths.pop(0)
        for w in sorted(graph[path[-1]] & members):
            if w == start:
                return path + [start]
            if w not in path:
                paths.append(path + [w])
    return component


def _describe(cycles: list[list[str]]) -> str:
    return "; ".join(f"{' -> '.join(_a_cycle(c))} (component: {', '.join(c)})" for c in cycles)


# ---------------------------------------------------------------------------------------------- the graph itself


def test_the_graph_sees_imports_inside_functions_and_relative_ones():
    """The parser finds what the rules depend on: a relative import inside a function, a module imported from
    its package, an import of an external library (known edges of today's tree, so a broken parser fails here)."""
    graph = _imports()
    assert "experiments.measure.run" in graph["experiments.jobs.kinds"]  # `from ..measure.run import` in a function
    assert "experiments.measure.census" in graph["experiments.labs.leaks"]  # `from ..measure import census`
    assert "torch" in graph["experiments.measure.run"]
    assert "streamlit" in graph["app.main"]
    assert len(_modules()) > 60


# ---------------------------------------------------------------------------------------------- (a) cycles


def _cycles_in(pkg: str) -> list[list[str]]:
    return [c for c in _cycles() if all(_top(m) == pkg for m in c)]


def test_no_cycle_spans_two_packages():
    mixed = [c for c in _cycles() if len({_top(m) for m in c}) > 1]
    assert not mixed, f"import cycles across packages: {_describe(mixed)}"


def test_no_import_cycle_in_experiments():
    """Imports inside functions count: none may hold a cycle apart."""
    found = _cycles_in("experiments")
    assert not found, f"import cycles in experiments/: {_describe(found)}"


def test_the_cycle_finder_finds_what_the_rule_above_forbids(monkeypatch):
    """The rule above can fail: a loop of three modules (a graph given by hand) is found, a chain is not."""
    chain = {"experiments.a": {"experiments.b"}, "experiments.b": {"experiments.c"}, "experiments.c": set()}
    monkeypatch.setattr(sys.modules[__name__], "_internal_graph", lambda: chain)
    assert _cycles() == []
    loop = dict(chain, **{"experiments.c": {"experiments.a"}})
    monkeypatch.setattr(sys.modules[__name__], "_internal_graph", lambda: loop)
    assert _cycles() == [["experiments.a", "experiments.b", "experiments.c"]]


def test_engine_modules_import_no_private_name_of_another_module():
    """What one engine module needs of another is public (runner's `_Recorder`, `train_phases` and `Cancelled` were
    imported by four others): `from x import _name` names a private one."""
    modules, bad = _modules(), []
    for name, path in modules.items():
        if _top(name) != "experiments":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module != "__future__":
                bad += [f"{name}: {a.name}" for a in node.names if a.name.startswith("_")]
    assert not bad, f"private names imported: {bad}"


def test_no_import_cycle_in_app():
    found = _cycles_in("app")
    assert not found, f"import cycles in app/: {_describe(found)}"


def test_no_import_cycle_in_course():
    if not (ROOT / "course").is_dir():
        pytest.skip("no course/ package in this tree yet")
    found = _cycles_in("course")
    assert not found, f"import cycles in course/: {_describe(found)}"


# ---------------------------------------------------------------------------------------------- (b) layers


def _importers(pkg: str, forbidden: set[str]) -> dict[str, list[str]]:
    """Modules of `pkg` that import a forbidden top-level package: {module: [what it imports]}."""
    return {
        m: sorted(t for t in targets if _top(t) in forbidden)
        for m, targets in sorted(_imports().items())
        if _top(m) == pkg and any(_top(t) in forbidden for t in targets)
    }


def test_experiments_imports_neither_app_nor_course_nor_streamlit():
    bad = _importers("experiments", {"app", "course", "streamlit"})
    assert not bad, f"the engine imports a layer above it: {bad}"


def test_course_imports_neither_streamlit_nor_torch_nor_app():
    if not (ROOT / "course").is_dir():
        pytest.skip("no course/ package in this tree yet")
    bad = _importers("course", {"app", "streamlit", "torch"})
    assert not bad, f"course/ imports what it must not: {bad}"


def test_course_reaches_neither_torch_nor_streamlit_through_what_it_imports():
    """course/ may use torch-free engine modules (experiments.core); what those import counts too, also inside
    functions, so a lesson rule never drags in torch through a helper."""
    if not (ROOT / "course").is_dir():
        pytest.skip("no course/ package in this tree yet")
    graph, modules = _imports(), _modules()
    reached: dict[str, str] = {}  # module -> the course module it was reached from
    todo = [(m, m) for m in modules if _top(m) == "course"]
    while todo:
        m, origin = todo.pop()
        if m in reached:
            continue
        reached[m] = origin
        todo += [(t, origin) for t in graph.get(m, ()) if t in modules]
    bad = {m: (reached[m], t) for m in reached for t in graph[m] if _top(t) in {"torch", "streamlit", "app"}}
    assert not bad, f"course/ reaches torch, streamlit or app (module: (from course module, import)): {bad}"


def test_experiments_core_imports_without_torch():
    """The torch-free facts (config, vocabulary, metrics, ...) import with torch made unimportable."""
    core = sorted(m for m in _modules() if m.startswith("experiments.core."))
    assert core, "no experiments.core modules found"
    probe = "import sys\nsys.modules['torch'] = None\n" + "".join(f"import {m}\n" for m in core)
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_torch_probe_fails_for_a_module_that_needs_torch():
    """The probe above can fail: a module that imports torch does not import once torch is blocked."""
    probe = "import sys\nsys.modules['torch'] = None\nimport experiments.measure.tracker\n"
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "torch" in done.stderr


def test_the_web_server_imports_no_engine_module_that_needs_torch():
    """torch's import takes 2 s to 12 s on a busy server: the web process never imports it. Every engine module that
    app/ imports, inside a function too, imports with torch made unimportable (replays and runs happen in the worker
    and estimate processes, which import torch themselves)."""
    modules = _modules()
    used = sorted(
        {t for m, ts in _imports().items() if _top(m) == "app" for t in ts if t in modules and _top(t) == "experiments"}
    )
    assert len(used) > 10, used
    probe = "import sys\nsys.modules['torch'] = None\n" + "".join(f"import {m}\n" for m in used)
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_device_report_a_worker_sends_the_web_server_unpickles_without_torch():
    """The worker's device report crosses a process queue into the web server: a torch object in it (torch's
    TorchVersion was one) would import torch there on unpickling."""
    import base64
    import pickle

    from experiments.measure.device import device_info

    data = base64.b64encode(pickle.dumps(device_info("cpu", rates=False))).decode()
    probe = f"import sys, pickle, base64\nsys.modules['torch'] = None\npickle.loads(base64.b64decode('{data}'))\n"
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]


def test_only_the_backend_imports_experiments_among_app_modules():
    bad = {m: t for m, t in _importers("app", {"experiments"}).items() if m != "app.backend"}
    assert not bad, f"{len(bad)} app modules import experiments besides app/backend.py: {', '.join(bad)}"


# ---------------------------------------------------------------------------------------------- (c), (d) sizes


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def _big_modules(pkg: str) -> dict[str, int]:
    return {m: _lines(p) for m, p in _modules().items() if _top(m) == pkg and _lines(p) > MAX_MODULE_LINES}


def test_no_engine_module_over_400_lines():
    big = _big_modules("experiments")
    assert not big, f"modules over {MAX_MODULE_LINES} lines: {big}"


def test_no_app_or_course_module_over_400_lines():
    big = _big_modules("app") | _big_modules("course")
    assert not big, f"modules over {MAX_MODULE_LINES} lines: {big}"


def test_no_page_over_60_lines():
    pages = sorted((ROOT / "app" / "views").glob("*.py"))
    assert pages, "no pages found under app/views/"
    big = {p.name: _lines(p) for p in pages if _lines(p) > MAX_PAGE_LINES}
    assert not big, f"pages over {MAX_PAGE_LINES} lines: {big}"


# ---------------------------------------------------------------------------------------------- (e) one job panel

JOB_WIRING = ("start", "poll", "submit", "settle")  # app/ui/jobs.py's internals: pages use panel / run_button / outcome


def _job_wiring_calls(tree: ast.AST) -> list[str]:
    return [
        f"jobs.{node.func.attr} (line {node.lineno})"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "jobs"
        and node.func.attr in JOB_WIRING
    ]


def test_pages_run_their_jobs_through_the_one_job_panel():
    """Submit, poll and show are wired once (app/ui/jobs.py: panel, or run_button and outcome where a page's button
    and result sit apart); 15 pages wired them by hand, each a little differently. app/main.py settles every page's
    group after drawing it."""
    allowed = {"app.ui.jobs", "app.main"}
    bad = {
        m: calls
        for m, p in _modules().items()
        if _top(m) == "app" and m not in allowed
        for calls in [_job_wiring_calls(ast.parse(p.read_text(encoding="utf-8")))]
        if calls
    }
    assert not bad, f"modules that wire worker jobs by hand: {bad}"


def test_the_job_wiring_rule_finds_a_hand_wired_page():
    page = "from app.ui import jobs\n\ndef run():\n    jobs.start('ns', [])\n    jobs.poll('ns')\n"
    assert _job_wiring_calls(ast.parse(page)) == ["jobs.start (line 4)", "jobs.poll (line 5)"]
