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
