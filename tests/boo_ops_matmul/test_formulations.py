"""The matmul op's formulations: each computes the reference's function, and on CUDA the
class IREE gets wrong (16-bit, batched, sizes not multiples of 16) is padded first."""

from __future__ import annotations

import functools

import pytest
import torch

from boo_core import BooOpRegistry, Target
from boo_core.kernels.chain import compile_plan
from boo_core.substitute.candidates import signature_plan
from boo_core.verify.numerics import compare
from boo_ops_matmul import MatmulSignature
from boo_ops_matmul.formulations import _split_k, cuda_split_k_parts

CUDA = Target.parse("cuda:sm_80")


def formulations(signature, target=CUDA):
    return BooOpRegistry.default().formulations(signature, target)


@pytest.mark.parametrize("command", [
    "gemm -m 38 -n 65 -k 38 -u 1 -v 0 -b 3",
    "gemmbfp16 -m 17 -n 33 -k 9 -u 1 -v 1 -b 3 -C 1 -A 0.5 -B 1 --bias 1 --activation gelu",
    "gemmfp16 -m 64 -n 128 -k 32 -v 1 --bias 1 --activation relu",
])
def test_every_cuda_formulation_computes_the_reference(command):
    signature = BooOpRegistry.parse_command(command)
    assert_each_computes_the_reference(signature, {f.name: f.computation for f in formulations(signature)
                                                   if f.computation is not None})


def assert_each_computes_the_reference(signature, computations):
    """Each of ``computations`` (name -> function of the signature's inputs), run in the
    signature's dtype as the kernels compute, matches the reference in float64 within BOO's
    dtype-aware tolerance."""
    args = signature.get_sample_args()
    expected = signature.reference(*(a.double() for a in args))
    for name, compute in computations.items():
        result = compare(name, compute(*args), expected, accumulation_length=signature.accumulation_length)
        assert result.passed, str(result)


def test_the_racy_class_gets_the_padded_formulation_first():
    racy = MatmulSignature(m=38, n=65, k=38, batch=3, dtype=torch.float16)
    assert [f.name for f in formulations(racy)] == ["padded", "default", "f32_compute"]
    aligned = MatmulSignature(m=64, n=128, k=32, batch=3, dtype=torch.float16)
    assert [f.name for f in formulations(aligned)] == ["default", "padded", "f32_compute"]
    unbatched = MatmulSignature(m=38, n=65, k=38, dtype=torch.bfloat16)
    assert [f.name for f in formulations(unbatched)] == ["default", "padded", "f32_compute"]
    assert [f.name for f in formulations(racy, Target.parse("cpu"))] == ["default"]


def test_every_cuda_formulation_cross_compiles(private_cache):
    signature = MatmulSignature(m=17, n=33, k=9, batch=3, trans_a=True, dtype=torch.bfloat16)
    outcome = compile_plan(signature, CUDA, signature_plan(signature, CUDA), every=True)
    assert outcome.failed == [] and sorted(outcome.compiled) == ["default", "f32_compute", "padded"]


def test_a_long_k_float32_product_on_the_cpu_is_split_first():
    cpu = Target.parse("cpu")
    weight_gradient = MatmulSignature(m=192, n=768, k=25088, trans_a=True)  # a linear layer's, K = the tokens
    assert [f.name for f in formulations(weight_gradient, cpu)] == ["split_k", "default"]
    assert "split_k" not in [f.name for f in formulations(weight_gradient)]  # CUDA: 16-bit only
    for other in (MatmulSignature(m=768, n=768, k=6304, trans_a=True),  # K only 8x max(M, N)
                  MatmulSignature(m=64, n=64, k=4096),  # long, but small
                  MatmulSignature(m=192, n=768, k=25088, trans_a=True, dtype=torch.bfloat16)):  # data-tiled
        assert [f.name for f in formulations(other, cpu)] == ["default"], other


@pytest.mark.parametrize(("m", "n", "k", "parts"), [
    (96, 384, 100352, 49),  # ConvNeXt-T's first linear layers' weight gradients: 3 tiles, 49 slices of 2,048
    (192, 768, 25088, 8),  # its second stage's: 12 tiles; 8 slices divide K (11 would pad)
    (1024, 1024, 32768, 2),  # a decoder block's, 32 x 1,024 tokens: 64 tiles, 2 slices of 16,384
])
def test_a_long_k_16_bit_product_on_cuda_may_be_split(m, n, k, parts):
    signature = MatmulSignature(m=m, n=n, k=k, trans_a=True, dtype=torch.bfloat16)
    assert cuda_split_k_parts(signature) == parts
    assert [f.name for f in formulations(signature)] == ["default", "split_k", "padded", "f32_compute"]


def test_a_product_that_fills_the_gpu_or_has_a_short_k_is_not_split_on_cuda():
    for other in (MatmulSignature(m=3072, n=768, k=6304, trans_a=True, dtype=torch.bfloat16),  # 144 tiles
                  MatmulSignature(m=768, n=768, k=6304, trans_a=True, dtype=torch.bfloat16),  # 2 short slices
                  MatmulSignature(m=64, n=64, k=2048, dtype=torch.bfloat16),  # K short
                  MatmulSignature(m=96, n=384, k=100352, col_major=True, dtype=torch.bfloat16)):
        assert cuda_split_k_parts(other) is None
        assert "split_k" not in [f.name for f in formulations(other)]


@pytest.mark.parametrize("command", [
    "gemm -m 5 -n 7 -k 37 -u 1 -v 0 -b 2",
    "gemmbfp16 -m 6 -n 3 -k 64 -v 1 -C 1 -A 0.5 -B 1 --bias 1 --activation gelu",
])
def test_split_k_computes_the_reference(command):
    """Parts of K that do not divide it are zero-padded; the epilogue follows the sum."""
    signature = BooOpRegistry.parse_command(command)
    assert_each_computes_the_reference(signature, {
        f"split_k {parts}": functools.partial(_split_k, signature, parts) for parts in (1, 4, 5)})
