"""The ``boo`` console script, run for real in a subprocess."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from ..conftest import REPO

BOO = shutil.which("boo", path=str(Path(sys.executable).parent)) or "boo"


def boo(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([BOO, *args], capture_output=True, text=True, cwd=cwd)


def test_ops_lists_conv_with_its_distribution():
    result = boo("ops")
    assert result.returncode == 0, result.stderr
    assert "conv" in result.stdout and "keywords: conv" in result.stdout
    assert "from boo-ops-conv 0.1.0" in result.stdout


def test_driver_runs_the_sample_commands():
    result = boo("driver", "--commands-file", "examples/sample_commands.txt", "--iter", "3")
    assert result.returncode == 0, result.stdout + result.stderr
    sample = [line for line in (REPO / "examples" / "sample_commands.txt").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    for line in sample:
        assert f"\n{line}\n" in result.stdout
    assert result.stdout.count("time (us): min") == len(sample)
    assert result.stdout.count("TFLOP/s") == len(sample)


def test_driver_single_command_reports_timing_and_output():
    result = boo("driver", "convbfp16", "-n", "1", "-c", "8", "-H", "8", "-W", "8", "-k", "4", "-F", "1",
                 "--in_layout", "NHWC", "-i", "4")
    assert result.returncode == 0, result.stderr
    assert "conv2d_fwd_bf16_n1c8h8w8_k4c8y3x3" in result.stdout
    assert "(4 iterations)" in result.stdout
    assert "output: shape=(1, 4, 6, 6) dtype=bfloat16" in result.stdout  # only the input is NHWC


def test_driver_continues_past_a_bad_line_and_fails_at_the_end(tmp_path):
    commands = tmp_path / "commands.txt"
    commands.write_text("conv -n 1 -c 4 -H 6 -W 6 -k 4 -F 1\n"
                        "conv -n 1 -c 4 -H 6 -W 6 -k 4 -F 1 --pad_hh 1\n"
                        "conv -n 1 -c 4 -H 7 -W 7 -k 4 -F 1\n")
    result = boo("driver", "--commands-file", str(commands), "--iter", "2")
    assert result.returncode == 1
    assert result.stdout.count("time (us): min") == 2
    assert "error: unknown flag --pad_hh" in result.stdout
    assert "1 of 3 commands failed" in result.stderr


def test_driver_without_commands_explains_usage():
    result = boo("driver")
    assert result.returncode == 2
    assert "give a command" in result.stderr


def test_help_describes_subcommands():
    result = boo("--help")
    assert result.returncode == 0
    assert "driver" in result.stdout and "ops" in result.stdout
    assert "--commands-file" in boo("driver", "--help").stdout
