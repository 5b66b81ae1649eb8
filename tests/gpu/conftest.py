"""Fixtures of the GPU tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def exact_float32_references():
    """PyTorch's CUDA float32 convolutions and matmuls use TF32 by default: not a reference."""
    previous = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = previous


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A BOO kernel that fails at run time falls back to PyTorch with a BooFallbackWarning:
    right, but not BOO's kernel. In the GPU tests that is an error (a test that expects
    one catches it with pytest.warns)."""
    for item in items:
        if "tests/gpu/" in item.nodeid.replace("\\", "/") or item.nodeid.startswith("gpu/"):
            item.add_marker(pytest.mark.filterwarnings("error::boo_core.errors.BooFallbackWarning"))
