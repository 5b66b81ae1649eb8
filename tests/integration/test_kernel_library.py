"""The example kernel library (examples/boo_kernels_hopper) where it cannot build kernels:
installed beside the ops, it must supply nothing and change nothing. Its kernels themselves
are tested on a Hopper GPU (tests/gpu/test_kernel_library.py)."""

from __future__ import annotations

import pytest
import torch

from boo_core import Target, get_launchable
from boo_core.plugins.registry import BooOpRegistry
from boo_ops_matmul import MatmulSignature

gemm = pytest.importorskip("boo_kernels_hopper.gemm")
hooks = pytest.importorskip("boo_kernels_hopper.hooks")

SERVED = MatmulSignature(m=256, n=512, k=512, dtype=torch.bfloat16)


def test_it_knows_which_matmuls_it_serves():
    assert gemm.choose_config(gemm.problem_of(SERVED)) is not None
    for other in (MatmulSignature(m=256, n=512, k=512),  # float32
                  MatmulSignature(m=100, n=512, k=512, dtype=torch.bfloat16),  # not a multiple of the tiles
                  MatmulSignature(m=256, n=512, k=512, trans_a=True, dtype=torch.bfloat16)):
        problem = gemm.problem_of(other)
        assert problem is None or gemm.choose_config(problem) is None


@pytest.mark.skipif(gemm.unavailable_reason() is None, reason="this machine can build the library's kernels")
def test_without_triton_or_a_hopper_gpu_it_supplies_nothing(private_cache):
    assert hooks.boo_kernel_substitutions(SERVED, Target.parse("cuda:sm_80")) is None
    assert hooks.boo_kernel_substitutions(SERVED, Target.parse("cpu")) is None
    assert "hopper_kernels" in {p.name for p in BooOpRegistry.default().plugins.plugins}
    # BOO's own kernel serves, unchanged, on the CPU.
    launchable = get_launchable(MatmulSignature(m=8, n=8, k=8, dtype=torch.bfloat16), "cpu")
    assert launchable.substitution is None and launchable.formulation == "default"
