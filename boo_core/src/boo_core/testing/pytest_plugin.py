"""BOO's pytest plugin (entry point ``pytest11: boo``, loaded by pytest wherever boo-core is
installed; ``-p no:boo`` turns it off).

* Every test session compiles into a kernel cache of its own, never the user's:
  ``BOO_TEST_CACHE_DIR`` names one to reuse across sessions (subprocesses inherit it
  through ``BOO_CACHE_DIR``). pytest-xdist's workers share their controller's, so a kernel
  one worker built is loaded, not rebuilt, by the other.
* Fixture ``boo_cache``: a cache private to one test, and no launchables remembered in
  memory before or after it.
* iree-compile runs once per input in a session (:mod:`.compiles`), its outputs kept in a
  directory the session's processes share, and a formulation is exported once per signature
  in a process; ``BOO_TEST_COMPILE_ONCE=0`` turns both off.
* pytest-xdist workers that occupy every core compile on one thread each
  (``BOO_COMPILE_THREADING=0``, unless set), as ``boo preload -j`` does.
* A process's verification worker (:mod:`boo_core.runtime.worker`) waits an hour for work
  (``BOO_WORKER_IDLE=3600``, unless set), not a minute: it still exits with its caller, and
  a session no longer starts a new one (a Python importing torch, about 2 s of a core) after
  each minute without a kernel to check (33 were started in one CI run of the suite).
* The ``kernel`` mark, given to tests that built or loaded a kernel when they last ran
  (:mod:`.kernel_marker`): ``pytest -m "not kernel and not slow"`` is the fast loop.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..kernels.activity import LOG_VARIABLE
from ..kernels.pool import fills_the_cores
from ..runtime.lookup import clear_launchables
from ..settings import reload_from_environment
from .compiles import SWITCH, compiling_once
from .kernel_marker import MARK, KernelTestRecorder, is_xdist_worker

#: The directory of a session's kept compiler outputs, which its xdist workers inherit.
COMPILES_VARIABLE = "PYTEST_BOO_COMPILES"
_compiling = pytest.StashKey[contextlib.ExitStack]()


def pytest_configure(config: pytest.Config) -> None:
    # A worker inherits the environment its controller had set here before starting it.
    inherited = os.environ.get("BOO_CACHE_DIR") if is_xdist_worker(config) else None
    cache_dir = os.environ.get("BOO_TEST_CACHE_DIR") or inherited or tempfile.mkdtemp(prefix="boo-test-cache-")
    os.environ["BOO_CACHE_DIR"] = cache_dir
    os.environ.pop("BOO_CACHE_ON", None)
    os.environ.setdefault("BOO_WORKER_IDLE", "3600")
    if is_xdist_worker(config) and fills_the_cores(int(config.workerinput.get("workercount", 1))):  # type: ignore[attr-defined]
        os.environ.setdefault("BOO_COMPILE_THREADING", "0")
    reload_from_environment()
    config.addinivalue_line("markers", MARK)
    log = Path(tempfile.mkdtemp(prefix="boo-test-kernels-")) / "kernels.log"
    os.environ[LOG_VARIABLE] = str(log)
    config.pluginmanager.register(KernelTestRecorder(config, log), "boo-kernel-tests")
    if os.environ.get(SWITCH, "1") != "0":
        # xdist workers share their controller's; a session run inside a test shares its parent's
        directory = os.environ.get(COMPILES_VARIABLE) or tempfile.mkdtemp(prefix="boo-test-compiles-")
        os.environ[COMPILES_VARIABLE] = directory
        stack = contextlib.ExitStack()
        stack.enter_context(compiling_once(Path(directory)))
        config.stash[_compiling] = stack


def pytest_unconfigure(config: pytest.Config) -> None:
    stack = config.stash.get(_compiling, None)
    if stack is not None:
        stack.close()


@pytest.fixture
def boo_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A kernel cache of the test's own (its directory), with no launchables in memory."""
    directory = tmp_path / "boo-cache"
    monkeypatch.setenv("BOO_CACHE_DIR", str(directory))
    reload_from_environment()
    clear_launchables()
    yield directory
    clear_launchables()
    monkeypatch.undo()
    reload_from_environment()
