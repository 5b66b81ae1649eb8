"""Shared test setup: a private kernel cache, GPU skipping, and registry helpers."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import torch

import boo_core
from boo_core import BooOpRegistry, clear_launchables

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"


def pytest_configure(config: pytest.Config) -> None:
    # Every test run gets its own kernel cache (BOO_TEST_CACHE_DIR reuses one across runs);
    # subprocesses inherit it through the environment.
    cache_dir = os.environ.get("BOO_TEST_CACHE_DIR") or tempfile.mkdtemp(prefix="boo-test-cache-")
    os.environ["BOO_CACHE_DIR"] = cache_dir
    os.environ.pop("BOO_CACHE_ON", None)
    for name in ("BOO_STRICT_PLUGINS", "BOO_DISABLE_PLUGIN_AUTOLOAD", "BOO_DISABLE_PLUGINS",
                 "BOO_EXTRA_COMPILE_FLAGS"):
        os.environ.pop(name, None)
    boo_core.config.reload_from_environment()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
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
def private_cache(tmp_path, monkeypatch):
    """A kernel cache of the test's own, and no launchables remembered in memory."""
    directory = tmp_path / "cache"
    monkeypatch.setenv("BOO_CACHE_DIR", str(directory))
    boo_core.config.reload_from_environment()
    clear_launchables()
    yield directory
    clear_launchables()
    monkeypatch.undo()
    boo_core.config.reload_from_environment()
