"""Runtime-only deployments: with the cache filled where the compiler is, every first-party op
launches where it is not (``iree.compiler`` cannot be imported), and looking kernels up
exports nothing."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from boo_core import BooOpRegistry, clear_launchables, get_launchable
from boo_core.verify.numerics import check_launchable

from ..conftest import REPO

COMMANDS = [
    "conv -n 2 -c 4 -H 6 -W 6 -k 4 -y 3 -x 3 -p 1 -q 1 -F 1",
    "convbfp16 -n 1 -c 8 -H 5 -W 5 -k 8 -y 3 -x 3 -p 1 -q 1 -F 4 --in_layout NHWC --fil_layout NHWC --out_layout NHWC",
    "layernorm -X 6x16 -o 1 -m 1 -F 1",
    "layernorm -X 6x16 -o 1 -m 1 -F 2",
    "gemmbfp16 -m 8 -n 12 -k 16 -u 1",
    "softmax -n 2 -c 5 -H 3 -W 3 -F 1",
]

RUNTIME_ONLY = """
import sys
sys.modules["iree.compiler"] = None  # as if iree-base-compiler were not installed
from boo_core import BooOpRegistry, get_launchable
from boo_core.kernels import export
from boo_core.kernels.compiler import compiler_available
from boo_core.verify.numerics import check_launchable

assert not compiler_available()
for command in sys.argv[1:]:
    for signature in BooOpRegistry.parse_signatures(command):
        launchable = get_launchable(signature)
        failed = [str(c) for c in check_launchable(launchable) if not c.passed]
        assert launchable.cache_hit and not failed, (command, failed)
        print("ok", signature.func_name, launchable.formulation)
assert export.export_count == 0, export.export_count
print("exports", export.export_count)
"""


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.split()[0])
def test_every_first_party_op_runs_from_the_cache_without_the_compiler(command, private_cache):
    signatures = BooOpRegistry.parse_signatures(command)
    for signature in signatures:
        assert all(c.passed for c in check_launchable(get_launchable(signature)))
    clear_launchables()
    env = {**os.environ, "BOO_CACHE_DIR": str(private_cache), "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", RUNTIME_ONLY, command], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("ok ") == len(signatures) and "exports 0" in result.stdout
