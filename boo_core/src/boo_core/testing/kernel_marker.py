"""The ``kernel`` mark, given automatically: a test that built or loaded a BOO kernel when it
last ran is marked ``kernel`` from then on, so ``pytest -m "not kernel and not slow"`` runs
only the tests that need no kernel (the fast loop).

What each test did is read from the kernel log of :mod:`boo_core.kernels.activity`: every
BOO process started under this session (the test's own, its child processes, Ray workers)
appends to it each kernel it compiles, loads or waits for. The verdict travels in the
test's report (``user_properties``), so under pytest-xdist each worker judges its own tests
and only the controlling process, which receives every report, writes the record. The record
lives in pytest's own cache (``.pytest_cache``, key ``boo/kernel-tests``, as pytest keeps its
last failures): a fresh checkout, or ``-p no:cacheprovider``, marks nothing and runs
everything; each run updates the record for the tests it ran. A test may also carry the mark
itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

RECORD_KEY = "boo/kernel-tests"
MARK = "kernel: built or loaded a BOO kernel when last run (recorded; `-m 'not kernel and not slow'`: the fast loop)"
PROPERTY = "boo_built_kernels"  # the name of the verdict in a teardown report's user_properties


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def is_xdist_worker(config: pytest.Config) -> bool:
    """Whether this process is a pytest-xdist worker (the controller has no ``workerinput``)."""
    return hasattr(config, "workerinput")


class KernelTestRecorder:
    """The pytest plugin that gives and records the mark (module docstring)."""

    def __init__(self, config: pytest.Config, log: Path) -> None:
        self.cache = getattr(config, "cache", None)  # None under -p no:cacheprovider
        self.writes_record = not is_xdist_worker(config)
        self.log = log
        self.recorded: set[str] = set(self.cache.get(RECORD_KEY, [])) if self.cache is not None else set()
        self.ran: set[str] = set()
        self.needed: set[str] = set()
        self.log_size_at_start: dict[str, int] = {}

    @pytest.hookimpl(tryfirst=True)  # before -m deselects by mark
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            if item.nodeid in self.recorded:
                item.add_marker(pytest.mark.kernel)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        self.log_size_at_start[item.nodeid] = _size(self.log)
        yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
        outcome = yield
        if call.when == "teardown":  # made after the teardown ran: the whole test is in the log
            built = _size(self.log) > self.log_size_at_start.pop(item.nodeid, 0)
            outcome.get_result().user_properties.append((PROPERTY, built))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "teardown":
            return
        self.ran.add(report.nodeid)
        if (PROPERTY, True) in report.user_properties:
            self.needed.add(report.nodeid)

    def pytest_sessionfinish(self) -> None:
        if self.writes_record and self.cache is not None and self.ran:
            self.cache.set(RECORD_KEY, sorted((self.recorded - self.ran) | self.needed))
