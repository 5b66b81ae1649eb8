"""The ``boo`` console script, run for real in a subprocess.

These are the acceptance checks of the tools; finer behaviour is tested in process
(tests/boo_core/test_driver.py, test_preload.py, test_cache_admin.py, test_cli_options.py).
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

from boo_core import BooOpRegistry, Signature
from boo_core.kernels.cache import entry_directories
from boo_core.testing import write_fake_distribution
from boo_core.tools.report import DRIVER_COLUMNS, NUMERICS_COLUMNS

from ..conftest import REPO

BOO = shutil.which("boo", path=str(Path(sys.executable).parent)) or "boo"
SAMPLE = REPO / "examples" / "sample_commands.txt"
FAKE = "tests.boo_core.fake_plugins"


def boo(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([BOO, *args], capture_output=True, text=True, cwd=REPO, env={**os.environ, **(env or {})})


def sample_lines() -> list[str]:
    return [line for line in SAMPLE.read_text().splitlines() if line.strip() and not line.startswith("#")]


def sample_signatures() -> list[Signature]:
    """Every mode of every sample command (the file grows with each op plugin)."""
    return [signature for line in sample_lines() for signature in BooOpRegistry.parse_signatures(line)]


def rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def test_ops_lists_conv_with_its_distribution():
    result = boo("ops")
    assert result.returncode == 0, result.stderr
    assert "keywords: conv" in result.stdout and "from boo-ops-conv 0.1.0" in result.stdout


def test_help_explains_the_tools():
    result = boo("--help")
    assert result.returncode == 0
    for name in ("ops", "driver", "numerics", "preload", "cache"):
        assert f"    {name} " in result.stdout


def test_driver_runs_the_sample_commands_and_writes_csv(tmp_path):
    table = tmp_path / "results.csv"
    result = boo("driver", "--commands-file", str(SAMPLE), "--iter", "2", "--warmup", "1", "--csv", str(table))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = sample_lines()
    for line in lines:
        assert f"\n{line}\n" in result.stdout
    written = rows(table)
    assert list(written[0]) == list(DRIVER_COLUMNS)
    assert {r["command"] for r in written} == set(lines)
    # One block (time and throughput) per command, mode and backend.
    modes = len(sample_signatures())
    assert result.stdout.count("time (us): min") == result.stdout.count("TFLOP/s") == len(written) == modes
    assert {r["func_name"] for r in written} == {s.func_name for s in sample_signatures()}
    assert {"fwd", "bwd", "wrw"} <= {r["mode"] for r in written}
    assert all(r["status"] == "ok" and r["backend"] == "boo" and r["iterations"] == "2" for r in written)
    assert all(float(r["median_us"]) > 0 and float(r["tflops"]) > 0 and float(r["gbps"]) > 0 for r in written)
    assert f"CSV written to {table}" in result.stdout


def test_numerics_passes_on_the_sample_commands():
    result = boo("numerics", "--commands-file", str(SAMPLE))
    assert result.returncode == 0, result.stdout + result.stderr
    outputs = sum(len(signature.output_specs()) for signature in sample_signatures())
    assert result.stdout.count("  PASS\n") == outputs and "FAIL (" not in result.stdout
    assert f"summary: {outputs} PASS, 0 FAIL, 0 ERROR" in result.stdout


def test_driver_reports_a_malformed_line_with_its_flag_and_runs_the_others(tmp_path):
    commands = tmp_path / "commands.txt"
    commands.write_text("conv -n 1 -c 4 -H 6 -W 6 -k 4 -F 1\n"
                        "conv -n 1 -c 4 -H 6 -W 6 -k 4 -F 1 --pad_hh 1\n"
                        "conv -n 1 -c 4 -H 7 -W 7 -k 4 -F 1\n")
    table = tmp_path / "out.csv"
    result = boo("driver", "--commands-file", str(commands), "--iter", "2", "--csv", str(table))
    assert result.returncode == 1
    assert result.stdout.count("time (us): min") == 2
    assert f"error ({commands}:2): unknown flag --pad_hh" in result.stdout
    assert "1 of 3 commands failed" in result.stderr
    assert [(r["status"], r["error"]) for r in rows(table)] == [
        ("ok", ""), ("error", "unknown flag --pad_hh"), ("ok", "")]


def test_numerics_fails_on_a_deliberately_wrong_kernel(tmp_path):
    site = tmp_path / "site"
    write_fake_distribution(site, "boo-test-wrong", "1.0",
                            {"scale": f"{FAKE}.wrong_kernel"})
    table = tmp_path / "numerics.csv"
    env = {"PYTHONPATH": os.pathsep.join([str(site), str(REPO)])}
    result = boo("numerics", "scale", "-n", "8", "-F", "0", "--csv", str(table), env=env)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "y: max abs error" in result.stdout and "FAIL (8 elements out of tolerance)" in result.stdout
    assert "summary: 0 PASS, 2 FAIL, 0 ERROR" in result.stdout
    written = rows(table)
    assert list(written[0]) == list(NUMERICS_COLUMNS)
    assert [(r["mode"], r["output"], r["status"]) for r in written] == [("fwd", "y", "FAIL"), ("bwd", "y", "FAIL")]
    assert float(written[0]["max_rel_error"]) == 0.5


def test_preload_fills_the_cache_for_every_target_and_the_driver_then_compiles_nothing(tmp_path):
    env = {"BOO_CACHE_DIR": str(tmp_path / "cache")}
    commands = tmp_path / "distinct.txt"
    commands.write_text("conv -n 1 -c 4 -H 5 -W 5 -k 8 -F 1\n")
    targets = ("--target", "cpu", "--target", "cuda:sm_80", "--target", "rocm:gfx942")
    result = boo("preload", "--commands-file", str(commands), "-j", "2", *targets, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "compiled 3, cache hits 0, failed 0" in result.stdout
    assert "3/3  compiled 3, cache hits 0, failed 0" in result.stderr  # the progress bar

    # On the CPU the first formulation that compiles serves (im2col, first there for outputs at
    # most 4 pixels wide); GPU kernels are verified on first use, which may refuse one, so all
    # three conv formulations are compiled for them.
    info = boo("cache", "info", env=env)
    assert info.returncode == 0 and "entries: 7 (7 complete, 0 failed compiles, 0 broken)" in info.stdout
    assert "targets: cpu (1), cuda:sm_80 (3), rocm:gfx942 (3)" in info.stdout
    assert "formulations: default (2), explicit_pad (2), im2col (3)" in info.stdout

    table = tmp_path / "driver.csv"
    driver = boo("driver", "--commands-file", str(commands), "--iter", "1", "--csv", str(table), env=env)
    assert driver.returncode == 0, driver.stdout + driver.stderr
    assert [(r["cache"], r["compile_s"]) for r in rows(table)] == [("hit", "0.0000")]
    assert "kernel compiled" not in driver.stdout

    cleared = boo("cache", "clear", "--target", "cuda:sm_80", env=env)
    assert "removed 3 entries compiled for cuda:sm_80 (" in cleared.stdout
    assert "targets: cpu (1), rocm:gfx942 (3)" in boo("cache", "info", env=env).stdout
    assert boo("cache", "path", env=env).stdout.strip() == str(tmp_path / "cache")


def test_preload_reports_failures_with_their_reproducer(tmp_path):
    site = tmp_path / "site"
    write_fake_distribution(site, "boo-test-broken-mlir", "1.0",
                            {"scale": f"{FAKE}.broken_mlir"})
    env = {"PYTHONPATH": os.pathsep.join([str(site), str(REPO)]), "BOO_CACHE_DIR": str(tmp_path / "cache")}
    result = boo("preload", "scale", "-n", "5", env=env)
    assert result.returncode == 1
    assert "compiled 0, cache hits 0, failed 1" in result.stdout
    assert "FAILED scale_fwd_f32_n5_f2 for cpu (command line)\n  broken: iree-compile failed (exit 1)." in result.stdout
    [entry] = entry_directories(tmp_path / "cache")
    assert f"reproducer: {entry / 'source.mlir'} and {entry / 'compile_command.txt'}" in result.stdout
