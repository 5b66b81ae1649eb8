"""Matmul kernels against PyTorch in float64, on fresh random inputs, outputs poisoned with NaN."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from boo_core import get_launchable
from boo_core.testing import assert_numerics
from boo_core.verify.numerics import compare
from boo_ops_matmul import MatmulSignature

f32, f16, bf16 = torch.float32, torch.float16, torch.bfloat16


def case(m, n, k, **fields) -> MatmulSignature:
    return MatmulSignature(m=m, n=n, k=k, **fields)


CASES = [
    # every transpose combination, unbatched and batched, odd sizes
    case(7, 5, 3),
    case(7, 5, 3, trans_a=True),
    case(7, 5, 3, trans_b=True),
    case(7, 5, 3, trans_a=True, trans_b=True),
    case(6, 9, 11, batch=3),
    case(6, 9, 11, batch=3, trans_a=True, dtype=f16),
    case(6, 9, 11, batch=3, trans_b=True, dtype=bf16),
    case(6, 9, 11, batch=3, trans_a=True, trans_b=True),
    # alpha / beta
    case(33, 17, 65, alpha=0.5, beta=-1.5),
    case(5, 4, 129, batch=2, trans_a=True, alpha=-2.0, beta=0.25, dtype=f16),
    case(9, 13, 31, beta=1.0, dtype=bf16),
    case(8, 8, 8, alpha=0.0, beta=3.0),
    # column-major storage
    case(7, 5, 3, col_major=True),
    case(7, 5, 3, col_major=True, trans_a=True, beta=0.5),
    case(6, 9, 11, batch=2, col_major=True, trans_b=True, dtype=f16),
    case(6, 9, 11, col_major=True, trans_a=True, trans_b=True, dtype=bf16),
    # the linear layer: x @ w.T (+ bias), then an activation
    case(10, 3, 7, trans_b=True, bias=True),
    case(10, 3, 7, trans_b=True, bias=True, activation="relu", dtype=f16),
    case(19, 23, 45, trans_b=True, bias=True, activation="gelu", dtype=bf16),
    case(19, 23, 45, activation="silu"),
    case(6, 9, 11, batch=2, col_major=True, alpha=0.75, beta=-1.0, bias=True, activation="gelu"),
    # degenerate and larger sizes (2·256³ FLOPs runs on the threaded driver)
    case(1, 8, 1),
    case(1, 16, 300, trans_a=True, trans_b=True),  # (a single output would make max|ref| a poor scale)
    case(256, 256, 256, dtype=bf16),
]


def logical(stored: torch.Tensor, transposed: bool, col_major: bool) -> torch.Tensor:
    """A stored operand as the logical matrix, in float64, from MIOpen's rules alone."""
    t = stored.double()
    if col_major:  # a column-major R×C matrix is the row-major C×R tensor
        t = t.transpose(-1, -2)
    return t.transpose(-1, -2) if transposed else t


ACTIVATIONS = {
    None: lambda t: t,
    "relu": lambda t: t.clamp(min=0),
    "gelu": lambda t: 0.5 * t * (1 + torch.erf(t / math.sqrt(2))),
    "silu": lambda t: t / (1 + torch.exp(-t)),
}


def independent_reference(s: MatmulSignature, a, b, *rest) -> torch.Tensor:
    """alpha · op(A) @ op(B) + beta · C + bias, then the activation, written without the plugin."""
    y = s.alpha * torch.matmul(logical(a, s.trans_a, s.col_major), logical(b, s.trans_b, s.col_major))
    rest = list(rest)
    if s.beta != 0:
        y = y + s.beta * logical(rest.pop(0), False, s.col_major)
    if s.bias:
        y = y + rest.pop(0).double()
    y = ACTIVATIONS[s.activation](y)
    return y.transpose(-1, -2) if s.col_major else y


@pytest.mark.parametrize("signature", CASES, ids=lambda s: s.func_name)
def test_launchable_matches_float64_reference_with_poisoned_outputs(signature):
    assert_numerics(signature)


@pytest.mark.parametrize("signature", CASES, ids=lambda s: s.func_name)
def test_launchable_matches_independent_reference(signature):
    args = signature.get_sample_args()
    out = get_launchable(signature)(*args)
    expected = independent_reference(signature, *args)
    assert out.shape == expected.shape == signature.output_specs()[0].shape
    result = compare("out", out, expected, accumulation_length=signature.k)
    assert result.passed, str(result)


@pytest.mark.parametrize("wrong", [
    {"trans_b": False},  # B read as stored, not transposed
    {"col_major": True},  # the whole problem read column-major
    {"activation": None},  # activation dropped
])
def test_a_plausible_bug_fails_the_check(wrong):
    signature = case(8, 8, 8, trans_b=True, activation="silu")
    args = signature.get_sample_args()
    out = get_launchable(signature)(*args)
    assert compare("out", out, independent_reference(signature, *args), accumulation_length=8).passed
    mistaken = dataclasses.replace(signature, **wrong)
    assert not compare("out", out, independent_reference(mistaken, *args), accumulation_length=8).passed


def test_unwritten_elements_fail_the_check():
    signature = case(7, 5, 3)
    a, b = signature.get_sample_args()
    out = get_launchable(signature)(a, b)
    out[3, 2] = float("nan")
    result = compare("out", out, independent_reference(signature, a, b), accumulation_length=3)
    assert not result.passed and result.bad_elements == 1
