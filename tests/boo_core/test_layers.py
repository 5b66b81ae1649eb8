"""boo_core's stages are layers: an import goes down the order written here (and in
docs/architecture.md), never up; the import graph has no circle, counting imports made
inside functions; and boo_core's modules are imported at the top of a module, never inside
a function. A new package must be placed in the order before its first import passes."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import boo_core

ROOT = Path(boo_core.__file__).parent

#: The stages, lowest first. ``base``: errors, files, settings; ``api``: boo_core's own
#: ``__init__`` and the plugin front door (``boo_core.plugin``), which re-export the rest.
ORDER = ("base", "signatures", "kernels", "substitute", "plugins", "verify", "runtime", "cluster", "tune", "dynamo",
         "tools", "api", "testing")
BASE = {"errors", "files", "settings"}

def _stage(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1 or parts[1] == "plugin":
        return "api"
    return "base" if parts[1] in BASE else parts[1]


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_names() -> set[str]:
    return {_module_name(path) for path in ROOT.rglob("*.py")}


def _imports(path: Path, names: set[str] | None = None) -> dict[str, bool]:
    """The boo_core modules ``path`` imports when it runs (``if TYPE_CHECKING:`` blocks left
    out), each with whether the import is made inside a function. ``from . import tuner``
    names the module ``tuner``; ``from .tuner import Tuner`` the module ``tuner`` too."""
    names = _module_names() if names is None else names
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    typing_only = {id(node) for block in ast.walk(tree)
                   if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
                   for node in ast.walk(block)}
    in_function = {id(node) for function in ast.walk(tree)
                   if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
                   for node in ast.walk(function)}
    found: dict[str, bool] = {}

    def add(module: str, node: ast.AST) -> None:
        if module == "boo_core" or module.startswith("boo_core."):
            found[module] = found.get(module, False) or id(node) in in_function

    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            submodules = [f"{module}.{alias.name}" for alias in node.names if f"{module}.{alias.name}" in names]
            for imported in submodules or [module]:
                add(imported, node)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node)
    return found


def _graph() -> dict[str, dict[str, bool]]:
    """Each boo_core module's imports of boo_core modules (a package's ``__init__`` by the
    package's name), each with whether it is made inside a function."""
    names = _module_names()
    graph: dict[str, dict[str, bool]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        module = _module_name(path)
        edges: dict[str, bool] = {}
        for imported, in_function in _imports(path, names).items():
            while imported not in names:  # ``from boo_core.x import name``: the module x
                imported = imported.rpartition(".")[0]
            if imported != module:
                edges[imported] = edges.get(imported, False) or in_function
        graph[module] = edges
    return graph


def _upward() -> set[tuple[str, str]]:
    return {(module, imported) for module, edges in _graph().items() for imported in edges
            if ORDER.index(_stage(imported)) > ORDER.index(_stage(module))}


def _circles(graph: dict[str, dict[str, bool]]) -> list[list[str]]:
    """The import circles of ``graph``: its strongly connected components of more than one
    module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            following = next((e for e in edges if e in graph), None)
            if following is not None:
                if following not in index:
                    index[following] = low[following] = len(index)
                    stack.append(following)
                    on_stack.add(following)
                    work.append((following, iter(graph[following])))
                elif following in on_stack:
                    low[node] = min(low[node], index[following])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return circles


def test_every_module_belongs_to_a_stage_of_the_order():
    stages = {_stage(_module_name(path)) for path in ROOT.rglob("*.py")}
    assert stages <= set(ORDER), f"place {sorted(stages - set(ORDER))} in ORDER (and docs/architecture.md)"


def test_imports_go_down_the_stages():
    assert _upward() == set(), "imports up the stages: pass what is needed down instead"


def test_the_import_graph_has_no_circle():
    """Imports made inside functions count: hiding a circle in a function is still a circle."""
    assert _circles(_graph()) == []


def test_boo_core_modules_are_imported_at_the_top():
    inside = {(module, imported) for module, edges in _graph().items()
              for imported, in_function in edges.items() if in_function}
    assert inside == set(), "import these at the top of the module (a circle is broken by moving code, not by an "\
                            "import inside a function)"


def test_the_circle_check_finds_a_circle_made_inside_functions():
    graph = {"a": {"b": False}, "b": {"c": True}, "c": {"a": True}, "d": {"a": False}}
    assert _circles(graph) == [["a", "b", "c"]]
    assert _circles({"a": {"b": False}, "b": {}}) == []


def test_the_check_sees_an_upward_import(tmp_path, monkeypatch):
    """The checker itself: a module of the kernels stage importing the tuner is found."""
    package = tmp_path / "boo_core"
    for stage in ("kernels", "tune", "tools"):
        (package / stage).mkdir(parents=True)
        (package / stage / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "tune" / "tuner.py").write_text("")
    (package / "tools" / "cli.py").write_text("")
    (package / "kernels" / "bad.py").write_text("from ..tune.tuner import Tuner\n"
                                                "if TYPE_CHECKING:\n    from ..tools import cli\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", package)
    assert _upward() == {("boo_core.kernels.bad", "boo_core.tune.tuner")}
