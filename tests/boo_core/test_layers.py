"""boo_core's stages are layers: an import goes down the order written here (and in
docs/architecture.md), never up, except the few listed below with their reason, which may
only shrink. A new package must be placed in the order before its first import passes."""

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

#: Imports that still go up, each (importing module, imported module): the plugin registry,
#: which the lower stages ask for an op's parser, formulations and substitutions, and the
#: FusionPattern contract, which lives with torch.compile. Passing the registry down instead
#: removes them (issue 30, item 3).
UPWARD = {
    ("boo_core.signatures.commands", "boo_core.plugins.registry"),  # a commands file's lines parsed by their op
    ("boo_core.signatures.signature", "boo_core.plugins.registry"),  # to_command(): the op's parser writes it
    ("boo_core.kernels.request", "boo_core.plugins.registry"),  # an op's formulations, flags and source tag
    ("boo_core.kernels.request", "boo_core.substitute.build"),  # a substituted kernel's build
    ("boo_core.kernels.chain", "boo_core.substitute.candidates"),  # a user's substitution refused with its reason
    ("boo_core.substitute.candidates", "boo_core.plugins.registry"),  # the plugins' substitutions
    ("boo_core.substitute.executables", "boo_core.plugins.registry"),  # a kernel's executables, by its op
    ("boo_core.substitute.dump", "boo_core.plugins.registry"),  # the kernels a dump takes
    ("boo_core.plugins.opspec", "boo_core.dynamo.patterns"),  # OpSpec checks its fusion patterns' types
}


def _stage(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1 or parts[1] == "plugin":
        return "api"
    return "base" if parts[1] in BASE else parts[1]


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """The boo_core modules ``path`` imports when it runs (``if TYPE_CHECKING:`` blocks left out)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    typing_only = {id(node) for block in ast.walk(tree)
                   if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
                   for node in ast.walk(block)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                found.add(".".join(base + ([node.module] if node.module else [])))
            else:
                found.add(node.module or "")
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return {module for module in found if module == "boo_core" or module.startswith("boo_core.")}


def _upward() -> set[tuple[str, str]]:
    found = set()
    for path in sorted(ROOT.rglob("*.py")):
        module = _module_name(path)
        for imported in _imports(path):
            if ORDER.index(_stage(imported)) > ORDER.index(_stage(module)):
                found.add((module, imported))
    return found


def test_every_module_belongs_to_a_stage_of_the_order():
    stages = {_stage(_module_name(path)) for path in ROOT.rglob("*.py")}
    assert stages <= set(ORDER), f"place {sorted(stages - set(ORDER))} in ORDER (and docs/architecture.md)"


def test_imports_go_down_the_stages_but_for_the_listed_ones():
    upward = _upward()
    assert upward - UPWARD == set(), "new imports up the stages: pass what is needed down instead"
    assert UPWARD - upward == set(), "these no longer go up: take them off UPWARD"


def test_the_check_sees_an_upward_import(tmp_path, monkeypatch):
    """The checker itself: a module of the kernels stage importing the tuner is found."""
    package = tmp_path / "boo_core"
    (package / "kernels").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "kernels" / "__init__.py").write_text("")
    (package / "kernels" / "bad.py").write_text("from ..tune.tuner import Tuner\n"
                                                "if TYPE_CHECKING:\n    from ..tools import cli\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", package)
    assert _upward() == {("boo_core.kernels.bad", "boo_core.tune.tuner")}
