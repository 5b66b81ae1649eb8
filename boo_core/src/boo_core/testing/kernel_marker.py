"""The ``kernel`` mark, given automatically: a test that built or loaded a BOO kernel when it
last ran is marked ``kernel`` from then on, so ``pytest -m "not kernel and not slow"`` runs
only the tests that need no kernel (the fast loop).

What each test did is read from the kernel log of :mod:`boo_core.kernels.activity`: every
BOO process started under this session (the test's own, its child processes, Ray workers)
appends to it each kernel it compiles, loads or waits for. The record lives in pytest's own
cache (``.pytest_cache``, key ``boo/kernel-tests``, as pytest keeps its last failures): a
fresh checkout, or ``-p no:cacheprovider``, marks nothing and runs everything; each run
updates the record for the tests it ran. A test may also carry the mark itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

RECORD_KEY = "boo/kernel-tests"
MARK = "kernel: built or loaded a BOO kernel when last run (recorded; `-m 'not kernel and not slow'`: the fast loop)"


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


class KernelTestRecorder:
    """The pytest plugin that gives and records the mark (module docstring)."""

    def __init__(self, config: pytest.Config, log: Path) -> None:
        self.cache = getattr(config, "cache", None)  # None under -p no:cacheprovider
        self.log = log
        self.recorded: set[str] = set(self.cache.get(RECORD_KEY, [])) if self.cache is not None else set()
        self.ran: set[str] = set()
        self.needed: set[str] = set()

    @pytest.hookimpl(tryfirst=True)  # before -m deselects by mark
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            if item.nodeid in self.recorded:
                item.add_marker(pytest.mark.kernel)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        before = _size(self.log)
        yield
        self.ran.add(item.nodeid)
        if _size(self.log) > before:
            self.needed.add(item.nodeid)

    def pytest_sessionfinish(self) -> None:
        if self.cache is not None and self.ran:
            self.cache.set(RECORD_KEY, sorted((self.recorded - self.ran) | self.needed))
