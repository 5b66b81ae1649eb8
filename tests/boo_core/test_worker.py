"""Candidate kernels run in a worker process: a kernel that crashes or hangs while it is
verified or tuned fails its check, and the caller's process and its run go on
(:mod:`boo_core.runtime.worker`). The faulting kernels are real IREE CPU kernels
(:mod:`.fake_plugins.faulting_library`); one test shows the crashing one ends a process
that runs it itself."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

from boo_core import clear_launchables, get_launchable
from boo_core.kernels.python_child import python_command
from boo_core.runtime import worker
from boo_core.settings import settings_override
from boo_core.testing import isolated_registry
from boo_core.tune.tuner import TuneOptions, Tuner

from ..conftest import REPO
from .fake_plugins import scale_op
from .fake_plugins.faulting_library import FaultingLibrary

SIGNATURE = scale_op.ScaleSignature(size=37, factor=2.0)
CRASHED = "fail: it crashed the worker process (SIGSEGV)"
TIMEOUT = 3
HUNG = f"fail: it did not finish within {TIMEOUT} s (BOO_WORKER_TIMEOUT; the worker process was stopped)"


def faulting(fault: str):
    return isolated_registry({"scale": scale_op, "library": FaultingLibrary(fault)})


@pytest.mark.parametrize(("fault", "verdict"), [("crash", CRASHED), ("hang", HUNG)], ids=["crash", "hang"])
def test_a_kernel_that_faults_fails_its_check_and_the_next_formulation_serves(fault, verdict, private_cache):
    x = torch.randn(37)
    with settings_override(worker_timeout=TIMEOUT), faulting(fault):
        launchable = get_launchable(SIGNATURE)
        assert torch.equal(launchable(x), x * 2) and launchable.substitution is None
        [attempt] = launchable.passed_over
        assert attempt.stage == "verification" and f"with substitution {fault}" in attempt.formulation
        assert attempt.detail == verdict
        clear_launchables()
        again = get_launchable(SIGNATURE)  # the verdict was recorded: read, the kernel not run again
        assert [a.detail for a in again.passed_over] == [verdict]


IN_PROCESS = """
from boo_core import get_launchable
from boo_core.testing import isolated_registry
from tests.boo_core.fake_plugins import scale_op
from tests.boo_core.fake_plugins.faulting_library import FaultingLibrary
with isolated_registry({"scale": scale_op, "library": FaultingLibrary("crash")}):
    get_launchable(scale_op.ScaleSignature(size=37, factor=2.0))
print("survived")
"""


def test_without_the_worker_the_crashing_kernel_ends_the_process_that_checks_it(tmp_path):
    env = {**os.environ, "BOO_CACHE_DIR": str(tmp_path / "cache"), "BOO_WORKER": "0", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", IN_PROCESS], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == -signal.SIGSEGV and "survived" not in done.stdout, done.stderr[-2000:]


@pytest.mark.parametrize(("fault", "verdict"), [("crash", CRASHED), ("hang", HUNG)], ids=["crash", "hang"])
def test_a_tune_records_a_faulting_candidate_as_failed_and_finishes(fault, verdict, private_cache):
    with settings_override(worker_timeout=TIMEOUT), faulting(fault):
        [tune] = Tuner(TuneOptions(iterations=3, warmup=1)).tune([(SIGNATURE.to_command(), SIGNATURE)])
    faulted = [r for r in tune.results if r.substitution]
    assert [r.verdict for r in faulted] == [verdict] and faulted[0].time_us is None
    assert tune.winner and tune.winner != faulted[0].label
    assert all(r.verdict == "pass" and r.time_us > 0 for r in tune.results if not r.substitution)


def test_a_worker_that_exited_is_replaced_and_the_next_check_runs_there(private_cache):
    with settings_override(verify="all"), isolated_registry({"scale": scale_op}):
        assert get_launchable(scale_op.ScaleSignature(size=16)).verified
        first = worker._WORKER._process
        first.stdin.close()  # the worker exits, as it does when idle
        assert first.wait(timeout=60) == 0
        assert get_launchable(scale_op.ScaleSignature(size=17)).verified
        assert worker._WORKER._process.pid != first.pid


def test_a_worker_exits_after_boo_worker_idle_seconds_without_work(private_cache):
    with settings_override(verify="all", worker_idle=0.5), isolated_registry({"scale": scale_op}):
        assert get_launchable(scale_op.ScaleSignature(size=18)).verified
        served = worker._WORKER._process
        assert served.wait(timeout=60) == 0  # the wait after a check is the caller's setting
        assert get_launchable(scale_op.ScaleSignature(size=19)).verified
        assert worker._WORKER._process.pid != served.pid


def test_a_worker_started_by_a_thread_outlives_that_thread(private_cache):
    """Linux ends a child when the thread that started it ends (the worker asks to die with
    its parent): a worker started from a short-lived thread must not die with it, in the
    middle of another thread's check."""
    worker.close_worker()
    with settings_override(verify="all"), isolated_registry({"scale": scale_op}):
        found = []
        thread = threading.Thread(target=lambda: found.append(get_launchable(scale_op.ScaleSignature(size=23))))
        thread.start()
        thread.join()
        assert found[0].verified
        started = worker._WORKER._process
        time.sleep(1)  # the parent-death signal would have arrived by now
        assert started.poll() is None
        assert get_launchable(scale_op.ScaleSignature(size=24)).verified
        assert worker._WORKER._process is started


def test_a_signature_the_worker_cannot_import_is_checked_here(private_cache, caplog):
    class Local(scale_op.ScaleSignature):  # a class pickle cannot name
        pass

    with settings_override(verify="all"), isolated_registry({"scale": scale_op}), caplog.at_level("INFO"):
        launchable = get_launchable(Local(size=19))
        assert launchable.verified and torch.equal(launchable(torch.ones(19)), torch.full((19,), 2.0))
    assert "checked in this process (it cannot be sent to a worker process" in caplog.text


def test_python_children_import_nothing_from_the_directory_they_start_in(tmp_path):
    """The worker's and the runtime-only check's ``python -c``: a module planted in the
    working directory (a shared one) is never imported in place of the installed one."""
    (tmp_path / "json.py").write_text("raise SystemExit('the planted json was imported')\n")
    result = subprocess.run(python_command("import json; print(json.dumps('installed'))"), cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout, result.stderr) == (0, '"installed"\n', "")
