"""Kernels compile into a temporary cache, not the user's, unless ``BOO_CACHE_DIR`` names one
(subprocesses inherit it)."""

from __future__ import annotations

import os
import tempfile

import pytest


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("BOO_CACHE_DIR", tempfile.mkdtemp(prefix="boo-softmax-tests-"))
