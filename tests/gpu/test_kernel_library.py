"""The Hopper kernel library (examples/boo_kernels_hopper) on a Hopper GPU: the bf16
matmuls of benchmarks/gpu.py are served by its Triton-built sm_90a kernel, substituted into
IREE's module, verified by BOO, and right against float64. Skipped without the library,
Triton or a GPU of compute capability 9.0.
Run on the GPU machine: ``pytest -m gpu tests/gpu/test_kernel_library.py``."""

from __future__ import annotations

import pytest
import torch

from boo_core import get_launchable
from boo_ops_matmul import BooLinear, MatmulSignature

pytestmark = pytest.mark.gpu
gemm = pytest.importorskip("boo_kernels_hopper.gemm")

DEVICE = "cuda:0"
BF16 = torch.bfloat16
BENCHMARK_SHAPES = ((8192, 4096, 1024), (8192, 1024, 4096), (4096, 4096, 4096))  # (m, n, k)


@pytest.fixture(autouse=True)
def hopper():
    reason = gemm.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref).norm() / ref.norm())


@pytest.mark.parametrize(("m", "n", "k"), BENCHMARK_SHAPES)
def test_a_benchmark_matmul_is_served_by_the_library_kernel(private_cache, m, n, k):
    launchable = get_launchable(MatmulSignature(m=m, n=n, k=k, dtype=BF16), DEVICE)
    assert launchable.substitution is not None and launchable.substitution.name == "hopper_gemm"
    assert launchable.verified and not launchable.passed_over
    assert launchable.launch == "direct"  # launched by BOO on torch's stream, from the launch plan
    a = torch.randn(m, k, device=DEVICE, dtype=BF16)
    b = torch.randn(k, n, device=DEVICE, dtype=BF16)
    assert relative_error(launchable(a, b), a.double() @ b.double()) < 1e-2


def test_a_linear_layer_with_bias_is_served_too(private_cache):
    linear = BooLinear(512, 1024, device=DEVICE, dtype=BF16)  # x @ W.T + bias: B transposed, a bias vector
    x = torch.randn(2048, 512, device=DEVICE, dtype=BF16)
    with torch.no_grad():
        out = linear(x)
    ref = x.double() @ linear.weight.detach().double().T + linear.bias.detach().double()
    assert relative_error(out, ref) < 1e-2
    signature = MatmulSignature(m=2048, n=1024, k=512, trans_b=True, bias=True, dtype=BF16)
    launchable = get_launchable(signature, DEVICE)
    assert launchable.substitution is not None and launchable.substitution.name == "hopper_gemm"
    assert launchable.verified
