"""``BOO_COMPILE_THREADING=0``: iree-compile on one thread, the same kernel; ``boo preload -j``
with a process per core turns it on by itself."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from boo_core.kernels import compiler
from boo_core.kernels.pool import fills_the_cores
from boo_core.settings import settings_override

MLIR = """
func.func @double(%a: tensor<64xf32>) -> tensor<64xf32> {
  %0 = arith.addf %a, %a : tensor<64xf32>
  return %0 : tensor<64xf32>
}
"""
FLAGS = ("--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu")


def _recording_compiler(directory: Path) -> tuple[Path, Path]:
    """An ``iree-compile`` in ``directory`` that logs its arguments (one line a call) and
    runs the real one; the log's path."""
    directory.mkdir(exist_ok=True)
    log = directory / "calls.log"
    tool = directory / "iree-compile"
    tool.write_text(f'#!/bin/sh\necho "$*" >> {log}\nexec {compiler.iree_compile_path()} "$@"\n')
    tool.chmod(0o755)
    return tool, log


def test_one_thread_makes_the_same_kernel_and_the_reproducer_shown_leaves_the_option_out(tmp_path, monkeypatch):
    threaded = compiler.compile_to_bytes(MLIR, FLAGS)
    tool, log = _recording_compiler(tmp_path / "bin")
    monkeypatch.setattr(compiler, "iree_compile_path", lambda: str(tool))
    with settings_override(compile_threading=False):
        single = compiler.compile_to_bytes(MLIR, FLAGS)
        with pytest.raises(compiler.CompileError) as failed:
            compiler.compile_to_bytes("func.func @broken(", FLAGS)
    assert single == threaded
    calls = log.read_text().splitlines()
    assert len(calls) == 2 and all(compiler.SINGLE_THREADED in call.split() for call in calls), calls
    assert compiler.SINGLE_THREADED not in str(failed.value)  # the command shown is the one to rerun


@pytest.mark.parametrize("processes", ["every core", "one"])
def test_preload_with_a_process_per_core_compiles_on_one_thread_each(tmp_path, processes):
    cores = len(os.sched_getaffinity(0))
    if processes == "one" and fills_the_cores(1):
        pytest.skip("a machine of one core: one process fills it")
    jobs = cores if processes == "every core" else 1
    tool, log = _recording_compiler(tmp_path / "bin")
    env = {k: v for k, v in os.environ.items() if k != "BOO_COMPILE_THREADING"}
    env.update(IREE_TOOL_PATH=str(tool.parent), BOO_CACHE_DIR=str(tmp_path / "cache"))
    boo = str(Path(sys.executable).parent / "boo")
    result = subprocess.run([boo, "preload", "-j", str(jobs), "gemm -m 4 -n 4 -k 4", "gemm -m 4 -n 8 -k 4"],
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    calls = log.read_text().splitlines()
    assert len(calls) == 2, calls
    assert all((compiler.SINGLE_THREADED in call.split()) == (processes == "every core") for call in calls), calls
