"""The ``kernel`` mark of BOO's pytest plugin: recorded from what each test did, given on the
next run, so that ``pytest -m "not kernel"`` runs only the tests that need no kernel."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

TESTS = '''
from boo_core import get_launchable


def test_needs_no_kernel():
    assert 1 + 1 == 2


def test_builds_a_kernel():
    get_launchable("gemm -m 4 -n 4 -k 4")


def test_builds_one_in_a_child_process():
    import os, subprocess, sys
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOO_")}
    subprocess.run([sys.executable, "-c", "from boo_core import get_launchable; get_launchable('gemm -m 4 -n 8 -k 4')"],
                   env={**env, "BOO_CACHE_DIR": os.environ["BOO_CACHE_DIR"]}, check=True)
'''


@pytest.fixture
def pytester(pytester, tmp_path, monkeypatch):
    """pytester whose inner sessions share one kernel cache of this test's own: the first
    compiles each kernel, the later ones load it (a load is logged and marks a test too)."""
    monkeypatch.setenv("BOO_TEST_CACHE_DIR", str(tmp_path / "kernel-cache"))
    return pytester


@pytest.mark.kernel  # its inner sessions build kernels, which they log for themselves
def test_tests_that_built_a_kernel_are_marked_on_the_next_run_and_the_fast_loop_skips_them(pytester):
    """The first run is pytest-xdist's: each worker judges its own tests and the controller,
    which gets every report, writes the record (the workers' own cache writes would overwrite
    one another's). The later plain runs record for themselves."""
    pytest.importorskip("xdist")
    pytester.makepyfile(test_inner=TESTS)
    first = pytester.runpytest_subprocess("-p", "xdist", "-n", "2")
    first.assert_outcomes(passed=3)  # nothing recorded yet: everything runs
    fast = pytester.runpytest_subprocess("-m", "not kernel", "-v")
    fast.assert_outcomes(passed=1, deselected=2)
    fast.stdout.fnmatch_lines(["*test_needs_no_kernel PASSED*"])
    kernels = pytester.runpytest_subprocess("-m", "kernel", "-v")
    kernels.assert_outcomes(passed=2, deselected=1)
    # A test that stops needing kernels loses the mark once it has run again (without xdist);
    # the one whose child process loads a kernel keeps it.
    pytester.makepyfile(test_inner=TESTS.replace('get_launchable("gemm -m 4 -n 4 -k 4")', "pass"))
    pytester.runpytest_subprocess().assert_outcomes(passed=3)
    fast = pytester.runpytest_subprocess("-m", "not kernel", "-v")
    fast.assert_outcomes(passed=2, deselected=1)
    fast.stdout.fnmatch_lines(["*test_needs_no_kernel PASSED*", "*test_builds_a_kernel PASSED*"])
