"""What boo_core.testing checks of any plugin package, run on this one: its commands hold
up under fuzzing, its code imports boo_core only through the front door, and its tests
only through the front door and boo_core.testing."""

from __future__ import annotations

from pathlib import Path

import pytest

from boo_core.testing.front_door import private_imports, private_test_imports


def test_fuzzed_commands_parse_soundly_or_are_refused_naming_the_flag():
    fuzz = pytest.importorskip("boo_core.testing.fuzz", reason="fuzzing needs hypothesis (a test dependency)")
    counts = fuzz.fuzz_commands("rmsnorm", examples=200)
    assert counts[fuzz.PARSED] and counts[fuzz.REFUSED], counts


def test_the_package_imports_only_the_front_door():
    assert private_imports("boo_ops_rmsnorm") == []


def test_the_tests_import_only_the_front_door_and_the_testing_helpers():
    assert private_test_imports(Path(__file__).parent) == []
