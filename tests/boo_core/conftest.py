from __future__ import annotations

import pytest

from boo_core.testing import isolated_registry

from .fake_plugins import scale_op


@pytest.fixture
def scale_registry():
    """The process default registry holds only the scale test op (registered explicitly)."""
    with isolated_registry({"scale": scale_op}) as registry:
        yield registry
