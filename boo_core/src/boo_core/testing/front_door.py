"""A check for plugin packages: their code imports boo_core only through its front door,
:mod:`boo_core.plugin` (docs/plugins.md, "What a plugin may use"), so a change inside boo_core
cannot break them. Use it in a plugin's own tests (``from boo_core.testing import front_door``)::

    def test_my_op_imports_only_the_front_door():
        assert front_door.private_imports("my_op_package") == []

    def test_my_tests_import_only_the_front_door_and_the_testing_helpers():
        assert front_door.private_test_imports(Path(__file__).parent) == []

A package's tests may import :mod:`boo_core.testing` as well; its code may not.
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Mapping
from pathlib import Path

__all__ = ["FRONT_DOOR", "TESTING", "private_imports", "private_imports_in", "private_test_imports"]

FRONT_DOOR = "boo_core.plugin"
#: What a plugin's tests may import besides the front door: the testing helpers.
TESTING = "boo_core.testing"


def private_imports_in(sources: Mapping[str, str], *, tests: bool = False) -> list[str]:
    """Where ``sources`` (file name -> Python text) import anything of boo_core but the
    front door (and, for ``tests``, :mod:`boo_core.testing` and its modules), as
    ``"file:line: imports module"``."""
    allowed = (FRONT_DOOR, TESTING) if tests else (FRONT_DOOR,)
    problems = []
    for file, text in sources.items():
        for node in ast.walk(ast.parse(text, file)):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            problems += [f"{file}:{node.lineno}: imports {module}" for module in modules
                         if module.split(".")[0] == "boo_core"
                         and not any(module == a or module.startswith(f"{a}.") for a in allowed)]
    return problems


def private_imports(package: str) -> list[str]:
    """:func:`private_imports_in` over every module of the importable ``package``; a
    :class:`ValueError` names a package that cannot be found or is a single module."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"{package!r} is not an importable package")
    files = sorted(file for location in spec.submodule_search_locations for file in Path(location).rglob("*.py"))
    return private_imports_in({str(file): file.read_text() for file in files})


def private_test_imports(directory: str | Path) -> list[str]:
    """:func:`private_imports_in` over the test files under ``directory``, which may import
    :mod:`boo_core.testing` as well as the front door."""
    files = sorted(Path(directory).rglob("*.py"))
    return private_imports_in({str(file): file.read_text() for file in files}, tests=True)
