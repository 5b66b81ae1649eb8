"""examples/boo_ops_softmax, the example op plugin, used the way a third party would.

Its sources touch nothing private of boo_core and no other BOO op. In a fresh virtual
environment (``fresh_venv.py``) with boo-core alone, a torch.compile model leaves its softmax
to PyTorch; once the example is installed from its folder, ``boo ops`` lists it, ``boo driver``
runs its commands, the registry parses them, its numerics tests pass there, and the same
model runs its softmax, forward and backward, on BOO kernels.
"""

from __future__ import annotations

import ast
import itertools
import os
from pathlib import Path

import pytest

from boo_core.testing.front_door import private_imports, private_imports_in, private_test_imports

from ..conftest import REPO
from .fresh_venv import create_venv, pip_install, run, subprocess_env

EXAMPLE = REPO / "examples" / "boo_ops_softmax"

# Imports torch only: torch.compile finds the backend through its entry point, and the
# offload summary is read from BOO's INFO log.
COMPILE_SCRIPT = r'''
import logging, sys, torch
logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(name)s: %(message)s")
logging.getLogger("boo_core.dynamo").setLevel(logging.INFO)

class Model(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x * 2.0, dim=1)

x = torch.randn(4, 10, 3, requires_grad=True)
y = torch.compile(Model(), backend="iree_boo", dynamic=False)(x)
y.square().sum().backward()
x64 = x.detach().double().requires_grad_()
expected = Model()(x64)
expected.square().sum().backward()
torch.testing.assert_close(y, expected.float(), rtol=1e-5, atol=1e-6)
torch.testing.assert_close(x.grad, x64.grad.float(), rtol=1e-4, atol=1e-6)
print("ok")
'''

PARSE_SCRIPT = r'''
import importlib.metadata
from boo_core import BooOpRegistry
s = BooOpRegistry.parse_command("softmax -n 2 -c 8 -H 4 -W 4 -a 1 -m 1 -F 1")
print(type(s).__module__, type(s).__name__, s.n, s.c, s.h, s.w, s.algorithm, s.softmax_mode, s.mode, s.dtype)
print(importlib.metadata.requires("boo-ops-softmax"))
'''


# -- nothing private ----------------------------------------------------------------------------


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _root(node: ast.expr) -> str | None:
    """The name an expression such as ``a.b().c[0]`` starts from."""
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def private_uses(sources: dict[str, str]) -> list[str]:
    """Where ``sources`` (file name -> text) use something private of boo_core, or another op.

    Checked: imports of a private boo_core module or name; attributes with a private name of
    anything imported from boo_core (``Signature._x``, ``get_settings()._x``); and
    ``self._x`` / ``cls._x`` for an ``_x`` the sources never define (one inherited from a
    boo_core base class).
    """
    trees = {name: ast.parse(text, name) for name, text in sources.items()}
    defined = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                defined.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                defined.add(node.attr)
    problems = []
    for file, tree in trees.items():
        from_boo = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [(alias.name, alias.asname or alias.name.split(".")[0]) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [(node.module, None)]
            else:
                continue
            for module, bound in modules:
                top = module.split(".")[0]
                if top.startswith("boo_ops") and top != "boo_ops_softmax":
                    problems.append(f"{file}:{node.lineno}: imports another op, {module}")
                if top != "boo_core":
                    continue
                if any(_private(part) for part in module.split(".")):
                    problems.append(f"{file}:{node.lineno}: imports the private module {module}")
                if bound is not None:
                    from_boo.add(bound)
                    continue
                for alias in node.names:
                    if _private(alias.name):
                        problems.append(f"{file}:{node.lineno}: imports {alias.name} from {module}")
                    from_boo.add(alias.asname or alias.name)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and _private(node.attr)):
                continue
            root = _root(node.value)
            if root in from_boo:
                problems.append(f"{file}:{node.lineno}: uses {node.attr} of {root}, from boo_core")
            elif root in ("self", "cls") and isinstance(node.value, ast.Name) and node.attr not in defined:
                problems.append(f"{file}:{node.lineno}: uses {root}.{node.attr}, which the example does not define")
    return problems


def test_the_example_uses_nothing_private_of_boo_core():
    files = sorted(EXAMPLE.rglob("*.py"))
    assert {f.name for f in files} >= {"__init__.py", "hooks.py", "signature.py", "parser.py", "eager.py", "fusion.py"}
    assert private_uses({str(f.relative_to(REPO)): f.read_text() for f in files}) == []


@pytest.mark.parametrize("source, problem", [
    ("from boo_core.signatures.signature import _jsonable", "imports _jsonable from boo_core.signatures.signature"),
    ("import boo_core._hidden as h", "imports the private module boo_core._hidden"),
    ("from boo_core._hidden import thing", "imports the private module boo_core._hidden"),
    ("import boo_core\nboo_core.settings._current", "uses _current of boo_core"),
    ("from boo_core import config\nconfig._current", "uses _current of config"),
    ("from boo_core import get_settings\nget_settings()._x", "uses _x of get_settings"),
    ("from boo_core import CommandParser\nclass P(CommandParser):\n    def f(self):\n        return self._by_long",
     "uses self._by_long, which the example does not define"),
    ("from boo_ops_conv import boo_conv", "imports another op, boo_ops_conv"),
])
def test_the_check_finds_each_kind_of_private_use(source, problem):
    [found] = private_uses({"x.py": source})
    assert problem in found


def test_the_check_allows_the_examples_own_private_names_and_torchs_ops():
    source = ("import torch\nfrom boo_core import Signature\nclass S(Signature):\n    def _rows(self):\n"
              "        return self._rows, torch.ops.aten._softmax.default, super().__init__\n")
    assert private_uses({"x.py": source}) == []


# -- only the front door ------------------------------------------------------------------------

@pytest.mark.parametrize("package", ["boo_ops_softmax", "boo_ops_rmsnorm", "boo_kernels_hopper"])
def test_the_examples_and_the_kernel_library_import_only_the_front_door(package):
    files = sorted((REPO / "examples" / package / "src").rglob("*.py"))
    assert files
    assert private_imports_in({str(f.relative_to(REPO)): f.read_text() for f in files}) == []


@pytest.mark.parametrize("source", ["from boo_core import Signature", "import boo_core",
                                    "from boo_core.signatures.flags import number", "import boo_core.settings as s"])
def test_the_front_door_check_finds_other_imports_of_boo_core(source):
    assert len(private_imports_in({"x.py": source})) == 1


def test_tests_may_import_the_testing_helpers_too():
    source = "from boo_core.testing import assert_numerics\nimport boo_core.testing.fuzz\nimport boo_core.testing_x\n"
    assert private_imports_in({"t.py": source}, tests=True) == ["t.py:3: imports boo_core.testing_x"]
    assert len(private_imports_in({"t.py": source})) == 3


@pytest.mark.parametrize("example", ["boo_ops_softmax", "boo_ops_rmsnorm"])
def test_the_examples_tests_import_only_the_front_door_and_the_testing_helpers(example):
    assert private_test_imports(REPO / "examples" / example / "tests") == []


def test_the_check_reads_an_installed_package_by_name():
    assert private_imports("boo_ops_softmax") == []
    first_party = private_imports("boo_ops_batchnorm")  # BOO's own ops may reach past the front door
    assert first_party and all(": imports boo_core" in problem for problem in first_party)
    with pytest.raises(ValueError, match="'os.path' is not an importable package"):
        private_imports("os.path")


def test_the_front_door_holds_every_name_it_lists():
    import boo_core.plugin

    assert [name for name in boo_core.plugin.__all__ if not hasattr(boo_core.plugin, name)] == []
    assert private_imports_in({"x.py": "from boo_core.plugin import Signature\nimport torch"}) == []


# -- installed in a fresh environment -----------------------------------------------------------


def compile_log(venv: Path, env: dict[str, str], cwd: Path) -> list[str]:
    """The forward and backward summary lines of COMPILE_SCRIPT's run."""
    result = run([str(venv / "bin" / "python"), "-c", COMPILE_SCRIPT], env=env, cwd=cwd)
    assert result.returncode == 0 and result.stdout.split() == ["ok"], result.stderr[-4000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("boo_core.dynamo: iree_boo graph")]
    assert len(lines) == 2 and "(forward)" in lines[0] and "(backward)" in lines[1], result.stderr[-4000:]
    return lines


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv, environment, folder, compile log before the example was installed)."""
    root = tmp_path_factory.mktemp("softmax_example")
    venv = create_venv(root)
    env = subprocess_env(BOO_CACHE_DIR=str(root / "cache"), BOO_USE_BACKWARD_KERNELS="1", BOO_STRICT_PLUGINS="1")
    pip_install(venv, "boo_core")
    before = compile_log(venv, env, root)
    pip_install(venv, "examples/boo_ops_softmax")
    return venv, env, root, before


def test_boo_ops_lists_softmax_with_its_distribution(installed):
    venv, env, cwd, _ = installed
    result = run([str(venv / "bin" / "boo"), "ops"], env=env, cwd=cwd)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["softmax", "keywords:", "softmax", "from", "boo-ops-softmax", "0.1.0"]


def test_boo_driver_runs_a_softmax_command(installed):
    venv, env, cwd, _ = installed
    result = run([str(venv / "bin" / "boo"), "driver", "softmax", "-n", "2", "-c", "8", "-H", "4", "-W", "4",
                  "-a", "1", "-m", "1", "-F", "1"], env=env, cwd=cwd)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "softmax_fwd_f32_n2c8h4w4_accurate_channel_alpha1p0_beta0p0  [mode fwd" in result.stdout
    assert "time (us): min" in result.stdout
    assert "summary: 1 command, 1 runs (mode x backend), 0 failed" in result.stdout


def test_the_registry_parses_softmax_commands_and_the_example_depends_on_boo_core_only(installed):
    venv, env, cwd, _ = installed
    result = run([str(venv / "bin" / "python"), "-c", PARSE_SCRIPT], env=env, cwd=cwd)
    assert result.returncode == 0, result.stderr
    signature, requires = result.stdout.splitlines()
    assert signature == "boo_ops_softmax.signature SoftmaxSignature 2 8 4 4 accurate channel fwd torch.float32"
    assert requires == "['boo-core<0.2,>=0.1']"


@pytest.mark.kernel  # built or loaded by the session it runs, whose kernel log is its own
def test_the_examples_numerics_tests_pass_there(installed):
    venv, env, cwd, _ = installed
    # The inner session's kernel cache is this session's (BOO's pytest plugin gives each session
    # a fresh one otherwise): it compiles the kernels this session's own run of the same tests
    # (examples/boo_ops_softmax/tests) compiles, under the same keys (an op's key names its
    # distribution, version and a hash of its sources, not where it is installed), so whichever
    # runs second loads them.
    env = {**env, "BOO_TEST_CACHE_DIR": os.environ["BOO_CACHE_DIR"]}
    result = run([str(venv / "bin" / "python"), "-m", "pytest", "-v", "-p", "no:cacheprovider",
                  str(EXAMPLE / "tests" / "test_numerics.py")], env=env, cwd=cwd)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    for algorithm, softmax_mode, mode in itertools.product(("fast", "accurate", "log"), ("instance", "channel"),
                                                           ("fwd", "bwd")):
        assert any(f"softmax_{mode}_f32_" in line and f"_{algorithm}_{softmax_mode}_" in line and "PASSED" in line
                   for line in result.stdout.splitlines()), (algorithm, softmax_mode, mode)


def test_torch_compile_offloads_softmax_once_the_example_is_installed(installed):
    venv, env, cwd, before = installed
    forward, backward = before
    assert " 0 BOO kernels " in forward and "aten._softmax x1" in forward
    assert " 0 BOO kernels " in backward and "aten._softmax_backward_data x1" in backward
    forward, backward = compile_log(venv, env, cwd)
    assert " 1 BOO kernels [softmax.forward x1]" in forward and "aten._softmax" not in forward
    assert " 1 BOO kernels [softmax.backward x1]" in backward and "aten._softmax_backward_data" not in backward
