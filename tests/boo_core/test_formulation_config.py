"""A formulation may carry a per-dispatch configuration (``Formulation.config``): its kernel
is built with it untuned, a tuning candidate's configuration replaces it, and it is part of
the kernel's cache key."""

from __future__ import annotations

import re

import pytest

from boo_core import Target
from boo_core.kernels.formulation import Formulation
from boo_core.kernels.request import KernelRequest

from .fake_plugins.scale_op import ScaleSignature


def _distribution_tiles(request: KernelRequest) -> list[str]:
    kernel = request.fetch()
    return [tiles for path in (kernel.directory / "configurations").glob("*.mlir")
            for tiles in re.findall(r"distribution = \[[^\]]*\]", path.read_text())]


def test_a_formulations_configuration_builds_its_kernel_and_a_tuned_one_replaces_it(private_cache):
    signature, cpu = ScaleSignature(96), Target.parse("cpu")
    configured = Formulation("default", config={"distribution": [32]})
    request = KernelRequest.create(signature, cpu, configured)
    assert request.config == {"distribution": [32]}
    assert _distribution_tiles(request) == ["distribution = [32]"]  # IREE's own choice is [96]
    tuned = KernelRequest.create(signature, cpu, configured, config={"distribution": [16]})
    assert _distribution_tiles(tuned) == ["distribution = [16]"]
    plain = KernelRequest.create(signature, cpu, Formulation("default"))
    assert plain.config is None
    assert len({request.key.digest, tuned.key.digest, plain.key.digest}) == 3


def test_a_configuration_must_be_a_mapping_that_can_be_recorded():
    with pytest.raises(TypeError, match="config must be a mapping"):
        Formulation("tiled", config=[32])
    with pytest.raises(TypeError):
        Formulation("tiled", config={"distribution": {32}})  # a set is not JSON
