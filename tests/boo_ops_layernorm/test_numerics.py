"""Layernorm kernels against float64 references, on fresh random inputs.

Each kernel is checked twice: by ``assert_numerics`` against the signature's own reference
(outputs poisoned with NaN first), and against ``reference.py``, written apart from the
plugin (``F.layer_norm`` and autograd in float64, mean and rstd by hand).
"""

from __future__ import annotations

import pytest
import torch

from boo_core import get_launchable
from boo_core.testing import assert_numerics
from boo_core.verify.numerics import compare, tolerance_for
from boo_ops_layernorm import LayerNormSignature as S

from . import reference

f32, f16, bf16 = torch.float32, torch.float16, torch.bfloat16

FORWARD = [
    S((4, 8), 1, True, True),
    S((3, 7), 1),  # odd sizes, no affine
    S((2, 5, 6), 1, weight=True),  # last 2 dims, weight only
    S((2, 3, 4, 5), 1, bias=True),  # 4-D over the last 3 dims, bias only
    S((2, 3, 4, 5, 6), 3, True, True),  # 5-D over the last 2
    S((2, 3, 4, 5, 6), 4, True, True, dtype=bf16),  # 5-D over the last 1
    S((5, 33), 1, True, True, dtype=f16),
    S((4, 3, 17), 1, True, True, dtype=bf16),
    S((9,), 0),  # one row: IREE writes mean and rstd with copies (the local-sync import bug)
    S((1, 768), 1, True, True),  # one row, as in single-token decoding
    S((3, 5, 7), 0, True, True, dtype=bf16),  # everything normalized
    S((64, 512), 1, True, True),
    S((2, 3, 4, 5), 2, True, True, eps=1e-3, dtype=f16),
]

BACKWARD = [
    S((4, 8), 1, True, True, mode="bwd"),
    S((3, 7), 1, mode="bwd"),  # dx only
    S((2, 5, 6), 1, weight=True, mode="bwd"),  # dx, dw
    S((2, 3, 4, 5), 1, bias=True, dtype=bf16, mode="bwd"),  # dx, db
    S((2, 3, 4, 5, 6), 3, True, True, dtype=f16, mode="bwd"),
    S((9,), 0, True, True, mode="bwd"),  # one row: db is a copy of dy
    S((37, 19), 1, True, True, dtype=bf16, mode="bwd", gradients=("dw", "db")),  # prime row count: blocks of 1
    S((64, 512), 1, True, True, mode="bwd"),  # blocks of 16 rows
    S((48, 40), 1, weight=True, mode="bwd", gradients=("dw",)),
]


def ids(signature: S) -> str:
    return signature.func_name


def split_forward_args(signature: S, args):
    x, *params = args
    weight = params.pop(0) if signature.weight else None
    bias = params.pop(0) if signature.bias else None
    return x, weight, bias


@pytest.mark.parametrize("signature", FORWARD, ids=ids)
def test_forward_kernel_matches_its_reference_with_poisoned_outputs(signature):
    assert_numerics(signature)


@pytest.mark.parametrize("signature", FORWARD, ids=ids)
def test_forward_kernel_matches_an_independent_reference(signature):
    args = signature.get_sample_args()
    outputs = get_launchable(signature)(*args)
    x, weight, bias = split_forward_args(signature, args)
    expected = reference.forward(x, len(signature.normalized_shape), weight, bias, signature.eps)
    # A mean's rounding error scales with the mean of |x|, not with the mean itself (which
    # may cancel to nearly 0 in a short row): its tolerance comes from that scale.
    magnitude = reference.forward(x.abs(), len(signature.normalized_shape), eps=signature.eps)[1]
    for name, actual, ref in zip(("y", "mean", "rstd"), outputs, expected):
        tolerance = tolerance_for(actual.dtype, magnitude, signature.row_length) if name == "mean" else None
        result = compare(name, actual, ref, accumulation_length=signature.row_length, tolerance=tolerance)
        assert result.passed, str(result)
    assert outputs[1].dtype == outputs[2].dtype == f32


def test_forward_is_accurate_when_the_mean_dwarfs_the_spread():
    # E[x^2] - E[x]^2 would lose about four digits of the variance here; two passes do not.
    signature = S((16, 256), 1)
    x = torch.randn(16, 256) + 100
    y, _, rstd = get_launchable(signature)(x)
    expected_y, _, expected_rstd = reference.forward(x, 1)
    for name, actual, ref in (("y", y, expected_y), ("rstd", rstd, expected_rstd)):
        result = compare(name, actual, ref, accumulation_length=256)
        assert result.passed, str(result)


def test_a_kernel_checked_against_the_wrong_normalization_fails():
    signature = S((4, 6, 8), 1)
    x = signature.get_sample_args()[0]
    y = get_launchable(signature)(x)[0]
    assert compare("y", y, reference.forward(x, 2)[0], accumulation_length=48).passed
    assert not compare("y", y, reference.forward(x, 1)[0], accumulation_length=48).passed


@pytest.mark.parametrize("signature", BACKWARD, ids=ids)
def test_backward_kernel_matches_its_reference_with_poisoned_outputs(signature):
    assert_numerics(signature)


@pytest.mark.parametrize("signature", BACKWARD, ids=ids)
def test_backward_kernel_matches_autograd_in_float64(signature):
    x = torch.randn(signature.input_shape).to(signature.dtype)
    dy = torch.randn(signature.input_shape).to(signature.dtype)
    weight = torch.randn(signature.normalized_shape).to(signature.dtype) if signature.weight else None
    bias = torch.randn(signature.normalized_shape).to(signature.dtype) if signature.bias else None
    ndim = len(signature.normalized_shape)
    _, mean, rstd = reference.forward(x, ndim, eps=signature.eps)
    inputs = (dy, x, mean.float(), rstd.float(), *(() if weight is None else (weight,)))
    outputs = get_launchable(signature)(*inputs)
    outputs = (outputs,) if isinstance(outputs, torch.Tensor) else outputs
    expected = reference.backward(dy, x, ndim, weight, bias, signature.eps)
    assert len(outputs) == len(signature.gradients)
    for name, actual in zip(signature.gradients, outputs):
        length = signature.row_length if name == "dx" else signature.rows
        result = compare(name, actual, expected[name], accumulation_length=length)
        assert result.passed, str(result)
