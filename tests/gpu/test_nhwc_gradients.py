"""Channels-last weight and data gradients of odd sizes on the GPU, with default settings:
every kernel BOO launches is right against float64 PyTorch, into NaN-poisoned outputs. These
are the classes whose first route on CUDA the conv op's linalg formulations changed
(``implicit_split``, the stride-1 ``channels_last`` data gradient, and the Hopper library's
kernels substituted into them): tests/data/nhwc_gradient_commands.txt.
Run on the GPU machine: ``pytest -m gpu tests/gpu/test_nhwc_gradients.py``."""

from __future__ import annotations

import pytest

from boo_core import BooOpRegistry, get_launchable
from boo_core.verify.numerics import check_launchable

from ..conftest import REPO

pytestmark = pytest.mark.gpu
COMMANDS = [line.strip() for line in (REPO / "tests/data/nhwc_gradient_commands.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_channels_last_gradient_is_right_on_the_gpu(private_cache, command):
    for signature in BooOpRegistry.parse_signatures(command):
        launchable = get_launchable(signature, "cuda:0")
        failed = [str(c) for c in check_launchable(launchable) if not c.passed]
        assert not failed, f"{command} ({launchable.formulation}): {failed}"
