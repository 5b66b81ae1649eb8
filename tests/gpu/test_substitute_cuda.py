"""The CUDA kernel ABI of docs/gpu.md on a real GPU: a hand-written PTX kernel, launched by
IREE from a substituted executable with its own block size, grid and 96 KiB of dynamic
shared memory (above the 48 KiB default, so IREE's runtime must opt the kernel in).
Run on a GPU machine: ``source .gpu/setup.sh; pytest -m gpu tests/gpu``."""

from __future__ import annotations

import pytest
import torch

from boo_core import get_launchable
from boo_core.testing import isolated_registry

from ..boo_core.fake_plugins import scale_op
from ..boo_core.fake_plugins.scale_op import ScaleSignature
from ..boo_core.test_substitute_cuda import external

pytestmark = pytest.mark.gpu


@pytest.fixture
def scale_registry():
    with isolated_registry({"scale": scale_op}) as registry:
        yield registry


def test_a_ptx_kernel_with_96k_of_dynamic_shared_memory_runs_and_verifies(scale_registry, private_cache):
    launchable = get_launchable(ScaleSignature(size=37, factor=2.0), "cuda:0", target="cuda:sm_80",
                                substitutions=external())
    x = torch.randn(37, device="cuda:0")
    assert torch.equal(launchable(x), x * 2)
    assert launchable.verified and launchable.substitution.name == "external-ptx"
