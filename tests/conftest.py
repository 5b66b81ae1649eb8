"""Shared test setup: a private kernel cache, GPU skipping, and registry helpers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

import boo_core
from boo_core import BooOpRegistry

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"


def pytest_configure(config: pytest.Config) -> None:
    # boo-core's pytest plugin gives the session its own kernel cache; these tests also need
    # the plugin switches and extra flags at their defaults.
    for name in ("BOO_STRICT_PLUGINS", "BOO_DISABLE_PLUGIN_AUTOLOAD", "BOO_DISABLE_PLUGINS", "BOO_LOAD_PLUGINS",
                 "BOO_EXTRA_COMPILE_FLAGS", "BOO_VERIFY", "BOO_TUNING_SPEC_PATH", "BOO_USE_TUNED",
                 "BOO_SUBSTITUTIONS"):
        os.environ.pop(name, None)
    boo_core.settings.reload_from_environment()


#: Seconds the slowest test files took in a fresh-clone CI run on two cores. pytest-xdist
#: hands out whole files (``--dist loadfile``) in collection order, and integration tests
#: are collected last: the heaviest file handed out last keeps one worker busy while the
#: other idles. So these run first, heaviest first (the others keep their order).
HEAVY_FILES = {
    "tests/integration/test_models.py": 95, "tests/boo_core/test_cluster.py": 75, "tests/integration/test_cli.py": 65,
    "tests/integration/test_ddp.py": 50, "tests/boo_core/test_kernel_marker.py": 48,
    "tests/integration/test_fuzz_commands.py": 45, "tests/boo_core/test_tune.py": 45,
    "tests/boo_core/test_cache_kill.py": 45, "tests/integration/test_torch_compile.py": 45,
    "tests/boo_ops_conv/test_numerics.py": 45, "tests/boo_ops_conv/test_formulations.py": 40,
    "tests/integration/test_softmax_example.py": 40, "tests/boo_ops_conv/test_corpus.py": 40,
    "tests/integration/test_install.py": 30,
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: -HEAVY_FILES.get(item.nodeid.partition("::")[0], 0))  # stable: files stay whole
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def fresh_default_registry():
    """Forget the process-wide registry before and after the test (it rescans lazily)."""
    previous = BooOpRegistry.reset()
    yield
    BooOpRegistry.reset(previous)


@pytest.fixture
def private_cache(boo_cache):
    """A kernel cache of the test's own (boo-core's pytest plugin), no launchables in memory."""
    return boo_cache


@pytest.fixture
def boo_env(monkeypatch):
    """``boo_env(NAME=value, ...)``: set BOO_* environment variables and re-read the settings
    (restored after the test)."""

    def set_env(**variables: str) -> boo_core.Settings:
        for name, value in variables.items():
            monkeypatch.setenv(name, value)
        return boo_core.settings.reload_from_environment()

    yield set_env
    monkeypatch.undo()
    boo_core.settings.reload_from_environment()
