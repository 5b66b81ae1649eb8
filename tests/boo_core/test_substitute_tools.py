"""Substitution through the tools: ``--substitutions`` on the driver, numerics and preload,
``boo dump``, and the marks in the driver output, ``boo cache info`` and the offload report."""

from __future__ import annotations

import csv
import json

import pytest
import torch

from boo_core.dynamo.rewrite import rewrite
from boo_core.testing import isolated_registry
from boo_core.tools.cli import main

from .fake_plugins.scale_op import ScalePlugin, ScaleSignature
from .substitutions import NUDGED, scale_substitution
from .test_rewrite import MulByConstant, graph

SIGNATURE = ScaleSignature(size=8, factor=2.0)
COMMAND = ["scale", "-n", "8", "-f", "2"]


@pytest.fixture
def root(scale_registry, private_cache, tmp_path):
    """A substitution root holding a verifying substitution of the scale kernel."""
    scale_substitution(tmp_path / "root" / "cpu" / SIGNATURE.func_name, SIGNATURE, NUDGED)
    return tmp_path / "root"


def test_the_driver_marks_substituted_kernels(root, capsys, tmp_path):
    table = tmp_path / "runs.csv"
    assert main(["driver", "--substitutions", str(root), "--csv", str(table), "--iter", "2", *COMMAND]) == 0
    out = capsys.readouterr().out
    assert f"boo: formulation default with SUBSTITUTED executables ({root}/cpu/{SIGNATURE.func_name}, verified): " \
           "kernel compiled in" in out
    [row] = csv.DictReader(table.open())
    assert row["substitution"] == f"{root}/cpu/{SIGNATURE.func_name}" and row["status"] == "ok"
    assert main(["driver", "--csv", str(table), "--iter", "2", *COMMAND]) == 0  # without: IREE's own kernel
    assert "SUBSTITUTED" not in capsys.readouterr().out
    [row] = csv.DictReader(table.open())
    assert row["substitution"] == ""


def test_cache_info_lists_substituted_kernels(root, capsys):
    assert main(["preload", "--substitutions", str(root), *COMMAND]) == 0
    assert "compiled 1, cache hits 0, failed 0" in capsys.readouterr().out
    assert main(["cache", "info", "--list"]) == 0
    out = capsys.readouterr().out
    assert "substituted kernels: 1 (executables replaced: boo cache info --list)" in out
    assert f"cpu, default, SUBSTITUTED executables ({root}/cpu/{SIGNATURE.func_name})" in out


def test_numerics_reports_a_refused_substitution(scale_registry, private_cache, tmp_path, capsys):
    scale_substitution(tmp_path / "root" / "cpu" / SIGNATURE.func_name, SIGNATURE, "3.000000e+00")
    assert main(["numerics", "--substitutions", str(tmp_path / "root"), *COMMAND]) == 1
    assert "ERROR: substitution" in capsys.readouterr().out


def test_a_missing_substitution_root_is_a_usage_error(scale_registry, capsys, tmp_path):
    assert main(["driver", "--substitutions", str(tmp_path / "nowhere"), *COMMAND]) == 2
    assert f"boo driver: error: --substitutions {tmp_path}/nowhere: not a directory" in capsys.readouterr().err


def test_dump_explains_itself(capsys):
    with pytest.raises(SystemExit):
        main(["dump", "--help"])
    text = capsys.readouterr().out
    assert "--to DIR" in text and "--substitutions ROOT" in text and "Examples:\n  boo dump --to dumps" in text
    assert "ROOT/<target>/<func_name>/sources/<executable>.mlir" in text


def test_dump_writes_each_mode_and_reports_failures(scale_registry, private_cache, tmp_path, capsys):
    assert main(["dump", "--to", str(tmp_path / "d"), "scale", "-n", "8", "-F", "0"]) == 0
    out = capsys.readouterr().out
    for mode in ("fwd", "bwd"):
        index = json.loads((tmp_path / "d" / "cpu" / f"scale_{mode}_f32_n8_f2" / "index.json").read_text())
        assert index["command"].startswith("scale") and index["target"] == "cpu"
        assert f"scale_{mode}_f32_n8_f2 for cpu: formulation default -> {tmp_path}/d/cpu/scale_{mode}_f32_n8_f2" in out
    assert main(["dump", "--to", str(tmp_path / "d"), "scale", "-n", "8", "--bogus", "1"]) == 1
    assert "error (command line): unknown flag --bogus" in capsys.readouterr().out
    assert main(["dump", "--to", str(tmp_path / "d"), "--target", "tpu", "scale"]) == 2


def test_dump_of_a_substituted_kernel(root, capsys, tmp_path):
    assert main(["dump", "--to", str(tmp_path / "d"), "--substitutions", str(root), *COMMAND]) == 0
    assert "with substituted executables: " in capsys.readouterr().out
    index = json.loads((tmp_path / "d" / "cpu" / SIGNATURE.func_name / "index.json").read_text())
    assert index["substitution"]["origin"] == "user"
    [source] = (tmp_path / "d" / "cpu" / SIGNATURE.func_name / "configurations").iterdir()
    assert "arith.constant 2.00000024 : f32" in source.read_text()  # IREE configured the substituted executable


def test_the_offload_report_marks_substituted_kernels(private_cache, tmp_path, boo_env):
    signature = ScaleSignature(20, 2.0)
    with isolated_registry({"scale": ScalePlugin(fusion_patterns=(MulByConstant(),))}):
        scale_substitution(tmp_path / "root" / "cpu" / signature.func_name, signature, NUDGED)
        boo_env(BOO_SUBSTITUTIONS=str(tmp_path / "root"))
        gm = graph(lambda x: torch.sin(x * 2.0), (4, 5))
        report = rewrite(gm, backend="iree_boo", kind="inference", as_custom_op=False)
    assert report.substituted == {signature.func_name: f"{tmp_path}/root/cpu/{signature.func_name}"}
    assert f"SUBSTITUTED executables: {signature.func_name} (" in report.line()
