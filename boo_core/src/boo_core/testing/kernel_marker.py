"""The ``kernel`` mark, given automatically: a test that built or loaded a BOO kernel when it
last ran is marked ``kernel`` from then on, so ``pytest -m "not kernel"`` runs only the tests
that need no kernel (the fast loop).

What each test did is read from this process's cache activity (:mod:`boo_core.kernels.activity`:
kernels compiled, loaded or waited for) and from the session's kernel cache and a test's
private one (``boo_cache``), which catch kernels built by the test's child processes. The
record lives in pytest's own cache (``.pytest_cache``, key ``boo/kernel-tests``, as pytest
keeps its last failures): a fresh checkout, or ``-p no:cacheprovider``, marks nothing and
runs everything; each run updates the record for the tests it ran.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..kernels import activity

RECORD_KEY = "boo/kernel-tests"
MARK = "kernel: built or loaded a BOO kernel when last run (recorded; `pytest -m 'not kernel'` is the fast loop)"
#: Activity that means a test needed a kernel.
_KERNEL_EVENTS = ("kernel hit", "kernel waited", "kernel compiled", "kernel compiled in memory")
#: Set on a test's node by the ``boo_cache`` fixture when its private cache holds kernels.
built_in_private_cache = pytest.StashKey[bool]()


def cache_entries(directory: Path | None) -> int:
    """How many entries (directories) a kernel cache holds (0 when there is none)."""
    if directory is None:
        return 0
    try:
        return sum(1 for entry in os.scandir(directory) if entry.is_dir() and not entry.name.startswith("."))
    except OSError:
        return 0


class KernelTestRecorder:
    """The pytest plugin that gives and records the mark (module docstring)."""

    def __init__(self, config: pytest.Config, session_cache: Path | None) -> None:
        self.cache = getattr(config, "cache", None)  # None under -p no:cacheprovider
        self.session_cache = session_cache
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
        before = activity.counts()
        entries = cache_entries(self.session_cache)
        yield
        after = activity.counts()
        self.ran.add(item.nodeid)
        if any(after[e] > before[e] for e in _KERNEL_EVENTS) or cache_entries(self.session_cache) > entries \
                or item.stash.get(built_in_private_cache, False):
            self.needed.add(item.nodeid)

    def pytest_sessionfinish(self) -> None:
        if self.cache is not None and self.ran:
            self.cache.set(RECORD_KEY, sorted((self.recorded - self.ran) | self.needed))
