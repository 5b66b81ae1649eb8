from __future__ import annotations

import pytest

from boo_core.testing import isolated_registry

from .compile_once import compiling_once
from .fake_plugins import scale_op


@pytest.fixture
def scale_registry():
    """The process default registry holds only the scale test op (registered explicitly)."""
    with isolated_registry({"scale": scale_op}) as registry:
        yield registry


@pytest.fixture(scope="module")
def compile_once():
    """iree-compile run once per MLIR text and flags for the module's tests (:mod:`.compile_once`)."""
    with compiling_once() as outputs:
        yield outputs
