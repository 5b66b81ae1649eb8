"""Installing the distributions into a fresh virtual environment, as a user would.

The new environment (``fresh_venv.py``) gets boo-core and boo-ops-conv by a real
(non-editable) pip install.
"""

from __future__ import annotations

import pytest

from .fresh_venv import create_venv, pip_install, run, subprocess_env

PARSE = ("from boo_core import BooOpRegistry\n"
         "s = BooOpRegistry.parse_command('convbfp16 -n 2 -c 8 -H 8 -W 8 -k 4 -y 3 -x 3 -p 1 -q 1 -u 1 -v 1 -l 1 "
         "-j 1 -m conv -g 1 -F 1 --in_layout NHWC --out_layout NHWC --fil_layout NHWC')\n"
         "print(type(s).__module__, type(s).__name__, s.dtype, s.input_layout)\n")


@pytest.fixture
def venv(tmp_path_factory):
    return create_venv(tmp_path_factory.mktemp("fresh"))


def test_install_core_and_conv_then_uninstall_conv(venv, tmp_path):
    python = str(venv / "bin" / "python")
    env = subprocess_env(BOO_CACHE_DIR=str(tmp_path / "cache"))

    pip_install(venv, "boo_core", "boo_ops_conv")
    parsed = run([python, "-c", PARSE], env=env, cwd=tmp_path)
    assert parsed.returncode == 0, parsed.stderr
    assert parsed.stdout.split() == ["boo_ops_conv.signature", "ConvSignature", "torch.bfloat16", "NHWC"]

    ops = run([str(venv / "bin" / "boo"), "ops"], env=env, cwd=tmp_path)
    assert ops.returncode == 0, ops.stderr
    assert "conv" in ops.stdout and "from boo-ops-conv 0.1.0" in ops.stdout

    uninstall = run([python, "-m", "pip", "uninstall", "-y", "-q", "boo-ops-conv"])
    assert uninstall.returncode == 0, uninstall.stderr
    failed = run([python, "-c", PARSE], env=env, cwd=tmp_path)
    assert failed.returncode != 0
    assert ("boo_core.errors.UnknownOpError: unknown op 'convbfp16'; no BOO ops are installed "
            "(install an op package such as boo-ops-conv)") in failed.stderr


@pytest.mark.parametrize("folder, distribution, command, expected", [
    ("boo_ops_layernorm", "boo-ops-layernorm", "layernormbfp16 --input 8x64 -o 1 -m 1 -F 1",
     "boo_ops_layernorm.signature LayerNormSignature"),
    ("boo_ops_matmul", "boo-ops-matmul", "gemm -m 64 -k 32 -n 128", "boo_ops_matmul.signature MatmulSignature"),
    ("boo_ops_batchnorm", "boo-ops-batchnorm", "bnormbfp16 -n 8 -c 16 -H 4 -W 4 -m 1 -F 1 -L NHWC",
     "boo_ops_batchnorm.signature BatchNormSignature"),
])
def test_each_op_installs_without_the_others(venv, tmp_path, folder, distribution, command, expected):
    python = str(venv / "bin" / "python")
    env = subprocess_env(BOO_CACHE_DIR=str(tmp_path / "cache"))
    pip_install(venv, "boo_core", folder)
    code = ("import sys\nfrom boo_core import BooOpRegistry\n"
            f"s = BooOpRegistry.parse_command({command!r})\n"
            "print(type(s).__module__, type(s).__name__, [e.name for e in BooOpRegistry.list_ops()],"
            " 'boo_ops_conv' in sys.modules)\n")
    result = run([python, "-c", code], env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(expected)
    assert result.stdout.strip().endswith("False")  # conv is not installed, nor imported
    ops = run([str(venv / "bin" / "boo"), "ops"], env=env, cwd=tmp_path)
    assert ops.returncode == 0, ops.stderr
    assert f"from {distribution} 0.1.0" in ops.stdout and "boo-ops-conv" not in ops.stdout
