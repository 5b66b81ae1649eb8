"""Every bnorm and CBAInfer mode of examples/bnorm_cbainfer_commands.txt on the GPU: each
kernel is BOO's own (not PyTorch standing in), passed first-use verification, and is right
against float64 PyTorch on fresh inputs with its outputs poisoned."""

from __future__ import annotations

import pytest

from boo_core import BooOpRegistry, get_launchable
from boo_core.signatures.commands import read_command_file
from boo_core.testing import assert_numerics

from ..conftest import REPO

pytestmark = pytest.mark.gpu
DEVICE = "cuda:0"
COMMANDS = [command for _, command in read_command_file(REPO / "examples" / "bnorm_cbainfer_commands.txt")]


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_runs_a_verified_boo_kernel(private_cache, command):
    for signature in BooOpRegistry.parse_signatures(command):
        launchable = get_launchable(signature, DEVICE)
        assert launchable.formulation != "pytorch", launchable.passed_over
        assert launchable.verified
        assert_numerics(launchable, device=DEVICE)
