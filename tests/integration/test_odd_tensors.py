"""Odd tensors given to launchables and to every eager entry point and module.

A tensor of the wrong shape, dtype, device or layout, or something that is not a tensor,
is a BOO error (``ArgumentError``, or ``UnsupportedError`` for a dtype BOO does not serve)
naming the argument, raised before any kernel is built or run. Empty tensors give what
PyTorch gives (an empty result, or PyTorch's own error as an ``ArgumentError``) without
any kernel being compiled. Launchables are checked property-based, with hypothesis
mutating the arguments of a real call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from boo_core import ArgumentError, BooOpRegistry, CommandError, Signature, TensorSpec, UnsupportedError
from boo_core.runtime import launchable as launchable_module
from boo_core.runtime import lookup
from boo_core.runtime.launchable import EmptyLaunchable
from boo_core.runtime.lookup import get_launchable
from boo_core.verify.numerics import check_launchable
from boo_ops_conv import BooConv2d, BooConvTranspose2d, boo_conv
from boo_ops_conv.eager import boo_conv_backward
from boo_ops_layernorm import BooLayerNorm, boo_layer_norm
from boo_ops_matmul import BooLinear, boo_linear, boo_matmul
from boo_ops_softmax import boo_softmax

f32, f16, f64 = torch.float32, torch.float16, torch.float64


def t(*shape: int, dtype: torch.dtype = f32) -> torch.Tensor:
    return torch.randn(shape).to(dtype)


@pytest.fixture
def no_kernels(monkeypatch):
    """Fail the test if any kernel is selected or compiled."""
    def refuse(*args, **kwargs):
        raise AssertionError("a kernel was built")

    monkeypatch.setattr(lookup, "select", refuse)
    monkeypatch.setattr(launchable_module.KernelRequest, "create", refuse)


# -- eager entry points: bad arguments -------------------------------------------------------------

HUGE = torch.zeros(1).expand(2**20, 2**20, 2**10)  # claims 2**50 elements, holds one

BAD_CALLS = [
    # boo_conv
    (lambda: boo_conv([[1.0]], t(4, 3, 3, 3)), ArgumentError, r"^boo_conv: x must be a torch.Tensor, got list$"),
    (lambda: boo_conv(t(1, 3, 5, 5), None), ArgumentError, r"^boo_conv: w must be a torch.Tensor, got NoneType$"),
    (lambda: boo_conv(t(1, 3, 5, 5).to_sparse(), t(4, 3, 3, 3)), ArgumentError,
     r"^boo_conv: x has layout torch.sparse_coo; BOO kernels read dense tensors"),
    (lambda: boo_conv(t(1, 3, 5, 5), t(4, 3, 3, 3).to("meta")), ArgumentError,
     r"^boo_conv: w is on meta, x on cpu; they must be on one device$"),
    (lambda: boo_conv(t(1, 3, 5, 5, dtype=f64), t(4, 3, 3, 3, dtype=f64)), UnsupportedError,
     r"^boo_conv: x has dtype torch.float64; supported: f32, f16, bf16$"),
    (lambda: boo_conv(t(1, 3, 5, 5), t(4, 3, 3, 3), t(4, dtype=f16)), ArgumentError,
     r"^boo_conv: b has dtype torch.float16, x torch.float32; they must match$"),
    (lambda: boo_conv(t(1, 3, 5, 5), t(4, 3, 3, 3), t(3)), ArgumentError,
     r"^boo_conv: b has shape \(3,\); expected \(4,\), one value per output channel$"),
    (lambda: boo_conv(t(1, 3, 5, 5), t(4, 3, 3, 3), t(1, 4)), ArgumentError, r"^boo_conv: b has shape \(1, 4\)"),
    (lambda: boo_conv(t(1, 6, 5, 5), t(4, 3, 3, 3)), ArgumentError,
     r"^boo_conv: x has 6 channels but w \(logical shape \(4, 3, 3, 3\)\) with groups=1 takes 3"),
    (lambda: boo_conv(t(1, 6, 5, 5), t(4, 3, 3, 3), groups=4), ArgumentError, r"takes 12, and groups must divide"),
    (lambda: boo_conv(t(1, 4, 5, 5), t(6, 2, 3, 3), groups=2, transposed=True), ArgumentError,
     r"^boo_conv: x has 4 channels; a transposed convolution's w \(logical shape \(6, 2, 3, 3\)\) needs "
     r"w.shape\[0\] == 4"),
    (lambda: boo_conv(t(1, 3, 5, 5), t(4, 3, 3, 3), stride=0), ArgumentError,
     r"^boo_conv: stride must be at least 1, got 0$"),
    (lambda: boo_conv(t(1, 3, 5, 5), t(4, 3, 3, 3), stride=1.5), ArgumentError,
     r"^boo_conv: stride must be an int or a sequence of 2 ints, got 1.5$"),
    (lambda: boo_conv(t(1, 3, 5, 5), t(4, 3, 3, 3), stride=(1,)), ArgumentError,
     r"^boo_conv: stride must be an int or a sequence of 2 ints, got \(1,\)$"),
    (lambda: boo_conv(t(1, 3, 5, 5), t(4, 3, 3, 3), stride=(1, 2.0)), ArgumentError,
     r"^boo_conv: stride must be an int, got 2.0$"),
    (lambda: boo_conv(t(1, 3, 5, 5), t(4, 3, 3, 3), padding=-1), ArgumentError,
     r"^boo_conv: padding must be at least 0, got -1$"),
    (lambda: boo_conv(t(1, 3, 5, 5), t(4, 3, 3, 3), dilation=True), ArgumentError,
     r"^boo_conv: dilation must be an int or a sequence of 2 ints, got True$"),
    (lambda: boo_conv(t(1, 3, 5, 5), t(4, 3, 3, 3), dilation=0), ArgumentError,
     r"^boo_conv: dilation must be at least 1, got 0$"),
    (lambda: boo_conv(t(1, 3, 5, 5), t(4, 3, 3, 3), groups="1"), ArgumentError,
     r"^boo_conv: groups must be an int, got '1'$"),
    (lambda: boo_conv(t(1, 3, 5, 5), t(4, 3, 3, 3), groups=0), ArgumentError,
     r"^boo_conv: groups must be at least 1, got 0$"),
    (lambda: boo_conv(t(1, 3, 2, 5), t(4, 3, 3, 3)), ArgumentError,
     r"^boo_conv: spatial dim 0 of x \(size 2, padding 0\) is too small for the filter \(size 3, dilation 1\)"),
    (lambda: boo_conv(t(1, 3, 9, 5), t(4, 3, 3, 3), dilation=(1, 3)), ArgumentError,
     r"spatial dim 1 of x \(size 5, padding 0\) is too small for the filter \(size 3, dilation 3\)"),
    (lambda: boo_conv(t(1, 3, 5, 5), t(4, 3, 3, 3), output_padding=1), ArgumentError,
     r"^boo_conv: output_padding \(1, 1\) applies to transposed convolutions only$"),
    (lambda: boo_conv(t(1, 3, 5, 5), t(3, 4, 3, 3), transposed=True, stride=2, output_padding=2), ArgumentError,
     r"^boo_conv: output_padding \(2, 2\) must be smaller than the stride \(2, 2\) or the dilation \(1, 1\)$"),
    (lambda: boo_conv(t(1, 3, 5, 5), t(4, 3, 3, 3), activation="swish"), UnsupportedError,
     r"^boo_conv: activation 'swish' is not supported; use one of relu, gelu, silu, sigmoid, tanh$"),
    (lambda: boo_conv(t(1, 3, 5, 5), t(4, 3, 3, 3), input_layout=4), ArgumentError,
     r"^boo_conv: input_layout must be a layout string such as 'NHWC', got 4$"),
    (lambda: boo_conv(t(1, 5, 5, 3), t(4, 3, 3, 3), shared_layout="NDHWC"), ArgumentError,
     r"^boo_conv: input_layout 'NDHWC' does not fit a 4-D tensor$"),
    (lambda: boo_conv(t(3, 5), t(4, 3, 3)), ArgumentError, r"^boo_conv: x has 2 dims and w has 3"),
    (lambda: boo_conv(HUGE, t(4, 3, 3)), ArgumentError,
     r"^boo_conv: x of shape \(1048576, 1048576, 1024\) has more than 2\*\*48 bytes of elements"),
    (lambda: boo_conv(t(1, 3, 5, 5), t(4, 3, 3, 3), padding="full"), ArgumentError,
     r"^boo_conv: padding 'full' must be an int, a tuple, 'valid' or 'same'$"),
    (lambda: boo_conv_backward(t(1, 4, 3, 3), t(1, 3, 5, 5), t(4, 3, 3, 3, dtype=f16)), ArgumentError,
     r"^boo_conv: w has dtype torch.float16, x torch.float32; they must match$"),
    (lambda: boo_conv_backward("dy", t(1, 3, 5, 5), t(4, 3, 3, 3)), ArgumentError,
     r"^boo_conv_backward: dy must be a torch.Tensor, got str$"),
    # boo_matmul and boo_linear
    (lambda: boo_matmul(3, t(3, 4)), ArgumentError, r"^boo_matmul: a must be a torch.Tensor, got int$"),
    (lambda: boo_matmul(t(2, 3), t(3, 4).to_sparse_csr()), ArgumentError,
     r"^boo_matmul: b has layout torch.sparse_csr"),
    (lambda: boo_matmul(t(2, 3), t(3, 4).to("meta")), ArgumentError, r"^boo_matmul: b is on meta, a on cpu"),
    (lambda: boo_matmul(t(2, 3, dtype=torch.int32), t(3, 4, dtype=torch.int32)), UnsupportedError,
     r"^boo_matmul: a has dtype torch.int32; supported: f32, f16, bf16$"),
    (lambda: boo_matmul(t(2, 3), t(3, 4), t(2, 4), beta=float("nan")), ArgumentError,
     r"^boo_matmul: beta must be finite, got nan$"),
    (lambda: boo_matmul(t(2, 3), t(3, 4), alpha="2"), ArgumentError, r"^boo_matmul: alpha must be a number, got '2'$"),
    (lambda: boo_matmul(t(2, 3), t(3, 4), alpha=10**400), ArgumentError, r"^boo_matmul: alpha must be finite"),
    (lambda: boo_matmul(t(2, 3), t(3, 4), bias=[1.0] * 4), ArgumentError,
     r"^boo_matmul: bias must be a torch.Tensor, got list$"),
    (lambda: boo_matmul(t(3), t(3)), ArgumentError, r"^boo_matmul: a and b must both be 2-D"),
    (lambda: boo_matmul(t(2, 3), t(4, 5)), ArgumentError, r"^boo_matmul: shapes \(2, 3\) and \(4, 5\) do not multiply"),
    (lambda: boo_linear(t(2, 3), None), ArgumentError, r"^boo_linear: w must be a torch.Tensor, got NoneType$"),
    (lambda: boo_linear(t(2, 3), t(4, 3), t(3)), ArgumentError,
     r"^boo_matmul: bias has shape \(3,\); expected \(4,\)$"),
    (lambda: boo_matmul(None, t(3, 4)), ArgumentError, r"^boo_matmul: a must be a torch.Tensor, got NoneType$"),
    (lambda: boo_linear(t(2, 3), t(4, 3, dtype=f16)), ArgumentError,
     r"^boo_matmul: b has dtype torch.float16, a torch.float32; they must match$"),
    # boo_layer_norm
    (lambda: boo_layer_norm("x", (4,)), ArgumentError, r"^boo_layer_norm: x must be a torch.Tensor, got str$"),
    (lambda: boo_layer_norm(t(2, 4), "4"), ArgumentError,
     r"^boo_layer_norm: normalized_shape must be an int or a sequence of ints, got '4'$"),
    (lambda: boo_layer_norm(t(2, 4), 4.0), ArgumentError,
     r"^boo_layer_norm: normalized_shape must be an int or a sequence of ints, got 4.0$"),
    (lambda: boo_layer_norm(t(2, 4), (4.0,)), ArgumentError,
     r"^boo_layer_norm: normalized_shape must be an int, got 4.0$"),
    (lambda: boo_layer_norm(t(2, 4), (4,), eps=float("nan")), ArgumentError,
     r"^boo_layer_norm: eps must be finite, got nan$"),
    (lambda: boo_layer_norm(t(2, 4), (4,), eps=-1e-5), ArgumentError,
     r"^boo_layer_norm: eps must not be negative, got -1e-05$"),
    (lambda: boo_layer_norm(t(2, 4), (4,), eps=None), ArgumentError,
     r"^boo_layer_norm: eps must be a number, got None$"),
    (lambda: boo_layer_norm(t(2, 4), (4,), t(4).to("meta")), ArgumentError,
     r"^boo_layer_norm: weight is on meta, x on cpu; they must be on one device$"),
    (lambda: boo_layer_norm(t(2, 4), (4,), None, t(4).to_sparse()), ArgumentError,
     r"^boo_layer_norm: bias has layout torch.sparse_coo"),
    (lambda: boo_layer_norm(t(2, 4, dtype=f64), (4,)), ArgumentError,
     r"^boo_layer_norm: x has dtype torch.float64; expected float32, float16 or bfloat16$"),
    # boo_softmax
    (lambda: boo_softmax((1.0, 2.0)), ArgumentError, r"^boo_softmax: x must be a torch.Tensor, got tuple$"),
    (lambda: boo_softmax(t(3, 4), dim=-3), ArgumentError, r"^boo_softmax: dim -3 is out of range for a 2-D tensor$"),
    (lambda: boo_softmax(t(3, 4), dim=None), ArgumentError, r"^boo_softmax: dim must be an int, got None$"),
    (lambda: boo_softmax(t(3, 4).to_sparse()), ArgumentError, r"^boo_softmax: x has layout torch.sparse_coo"),
    (lambda: boo_softmax(t(3, 4, dtype=torch.int64)), UnsupportedError, r"^softmax dtype torch.int64 is not supported"),
    # modules
    (lambda: BooConv2d(3, 4, 3)("x"), ArgumentError, r"^BooConv2d: input must be a torch.Tensor, got str$"),
    (lambda: BooConv2d(3, 4, 3)(t(5, 5)), ArgumentError,
     r"^BooConv2d: input has 2 dims \(shape \(5, 5\)\); expected 3 or 4$"),
    (lambda: BooConv2d(3, 4, 3)(t(1, 2, 5, 5)), ArgumentError, r"^boo_conv: x has 2 channels but w"),
    (lambda: BooConvTranspose2d(3, 4, 3)(t(1, 3, 5, 5).to("meta")), ArgumentError,
     r"^boo_conv: w is on cpu, x on meta; they must be on one device$"),
    (lambda: BooLinear(3, 4)(t(2, 5)), ArgumentError, r"^boo_linear: x of shape \(2, 5\) does not end in in_features"),
    (lambda: BooLinear(3, 4)(t(2, 3, dtype=f16)), ArgumentError, r"^boo_matmul: b has dtype torch.float32, a "
                                                                 r"torch.float16; they must match$"),
    (lambda: BooLayerNorm(4)(t(2, 5)), ArgumentError, r"^boo_layer_norm: normalized_shape \[4\] must be the trailing"),
    (lambda: BooLayerNorm(4)(None), ArgumentError, r"^boo_layer_norm: x must be a torch.Tensor, got NoneType$"),
]


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta state")
@pytest.mark.parametrize("call, error, pattern", BAD_CALLS)
def test_bad_arguments_are_boo_errors_naming_the_argument(call, error, pattern, no_kernels):
    with pytest.raises(error, match=pattern):
        call()


# -- eager entry points: odd but valid tensors work ---------------------------------------------------

def _close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(actual.double(), expected.double(), rtol=1e-4, atol=1e-4)


ODD_BUT_VALID = [
    # a lazily negated view, a strided bias, a transposed weight, a sliced input, requires_grad
    (lambda x: boo_conv(torch._neg_view(x), t(4, 3, 3, 3).fill_(0.5)),
     lambda x: F.conv2d(-x, torch.full((4, 3, 3, 3), 0.5)), (1, 3, 5, 5)),
    (lambda x: boo_conv(x, torch.ones(4, 3, 3, 3), torch.arange(8.0)[::2]),
     lambda x: F.conv2d(x, torch.ones(4, 3, 3, 3), torch.arange(8.0)[::2]), (1, 3, 5, 5)),
    (lambda x: boo_matmul(x, torch.ones(5, 3).mT), lambda x: x @ torch.ones(3, 5), (2, 3)),
    (lambda x: boo_matmul(x[:, ::2], torch.ones(3, 4)), lambda x: x[:, ::2] @ torch.ones(3, 4), (2, 6)),
    (lambda x: boo_linear(torch._neg_view(x), torch.ones(4, 3)), lambda x: -x @ torch.ones(3, 4), (2, 3)),
    (lambda x: boo_layer_norm(x.mT, (2,)), lambda x: F.layer_norm(x.mT, (2,)), (2, 3)),
    (lambda x: boo_softmax(torch._neg_view(x), 0), lambda x: torch.softmax(-x, 0), (4, 3)),
]


@pytest.mark.parametrize("call, expected, shape", ODD_BUT_VALID)
def test_odd_but_valid_tensors_work_like_torch(call, expected, shape):
    x = torch.randn(shape)
    _close(call(x), expected(x))


# -- empty tensors ------------------------------------------------------------------------------------

EMPTY = [
    # (BOO call, PyTorch's, the shapes of its tensor arguments)
    (lambda x, w: boo_conv(x, w), lambda x, w: F.conv2d(x, w), [(0, 3, 5, 5), (4, 3, 3, 3)]),
    (lambda x, w: boo_conv(x, w), lambda x, w: F.conv2d(x, w), [(1, 0, 5, 5), (4, 0, 3, 3)]),
    (lambda x, w: boo_conv(x, w), lambda x, w: F.conv1d(x, w), [(0, 3, 5), (4, 3, 3)]),
    (lambda x, w: boo_conv(x, w, padding=1), lambda x, w: F.conv3d(x, w, padding=1),
     [(0, 2, 3, 3, 3), (4, 2, 3, 3, 3)]),
    (lambda x, w: boo_conv(x, w, stride=2, transposed=True), lambda x, w: F.conv_transpose2d(x, w, stride=2),
     [(0, 3, 5, 5), (3, 4, 3, 3)]),
    (lambda x, w, b: boo_conv(x, w, b, activation="relu"), lambda x, w, b: F.relu(F.conv2d(x, w, b)),
     [(0, 3, 5, 5), (4, 3, 3, 3), (4,)]),
    (lambda x, w: boo_conv(x, w, shared_layout="NHWC"),
     lambda x, w: F.conv2d(x.permute(0, 3, 1, 2), w.permute(0, 3, 1, 2)).permute(0, 2, 3, 1),
     [(0, 5, 5, 3), (4, 3, 3, 3)]),
    (lambda x, w: boo_conv(x.to(memory_format=torch.channels_last), w), lambda x, w: F.conv2d(x, w),
     [(0, 3, 5, 5), (4, 3, 3, 3)]),
    (lambda a, b: boo_matmul(a, b), torch.matmul, [(0, 3), (3, 4)]),
    (lambda a, b: boo_matmul(a, b), torch.matmul, [(2, 3), (3, 0)]),
    (lambda a, b: boo_matmul(a, b), torch.matmul, [(2, 0), (0, 4)]),  # K = 0: zeros
    (lambda a, b: boo_matmul(a, b), torch.matmul, [(0, 2, 3), (0, 3, 4)]),
    (lambda a, b: boo_matmul(a, b), torch.matmul, [(3, 2, 0), (3, 0, 4)]),
    (lambda a, b, c: boo_matmul(a, b, c, alpha=3.0, beta=2.0), lambda a, b, c: torch.addmm(c, a, b, beta=2, alpha=3),
     [(2, 0), (0, 4), (2, 4)]),
    (lambda a, b, bias: boo_matmul(a, b, bias=bias, activation="relu"), lambda a, b, bias: F.relu(a @ b + bias),
     [(2, 0), (0, 4), (4,)]),
    (lambda x, w, b: boo_linear(x, w, b), F.linear, [(0, 3), (4, 3), (4,)]),
    (lambda x, w, b: boo_linear(x, w, b), F.linear, [(2, 0), (4, 0), (4,)]),  # in_features = 0: the bias
    (lambda x, w: boo_linear(x, w), F.linear, [(2, 0, 3), (4, 3)]),
    (lambda x, w: boo_linear(x, w), F.linear, [(2, 3), (0, 3)]),
    (lambda x: boo_layer_norm(x, (4,)), lambda x: F.layer_norm(x, (4,)), [(0, 4)]),
    (lambda x: boo_layer_norm(x, (0,)), lambda x: F.layer_norm(x, (0,)), [(2, 0)]),
    (lambda x, w, b: boo_layer_norm(x, (3, 4), w, b), lambda x, w, b: F.layer_norm(x, (3, 4), w, b),
     [(0, 3, 4), (3, 4), (3, 4)]),
    (lambda x: boo_softmax(x, -1), lambda x: torch.softmax(x, -1), [(0, 4)]),
    (lambda x: boo_softmax(x, 1, log=True), lambda x: torch.log_softmax(x, 1), [(3, 0, 2)]),
    (lambda x: boo_softmax(x, 0), lambda x: torch.softmax(x, 0), [()]),
]


@pytest.mark.parametrize("call, expected, shapes", EMPTY)
def test_empty_tensors_give_pytorchs_result_without_a_kernel(call, expected, shapes, no_kernels):
    args = [torch.randn(shape) for shape in shapes]
    result = call(*args)
    reference = expected(*args)
    assert result.shape == reference.shape and result.dtype == reference.dtype
    torch.testing.assert_close(result, reference)


@pytest.mark.parametrize("boo_class, torch_class, arguments, shape", [
    (BooConv2d, torch.nn.Conv2d, (3, 4, 3), (0, 3, 5, 5)),
    (BooConvTranspose2d, torch.nn.ConvTranspose2d, (3, 4, 3), (0, 3, 5, 5)),
    (BooLinear, torch.nn.Linear, (3, 4), (0, 3)),
    (BooLinear, torch.nn.Linear, (0, 4), (2, 0)),
    (BooLayerNorm, torch.nn.LayerNorm, (4,), (5, 0, 4)),
])
@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors is a no-op")
def test_modules_on_empty_inputs_match_their_torch_class(boo_class, torch_class, arguments, shape, no_kernels):
    module, reference = boo_class(*arguments), torch_class(*arguments)
    reference.load_state_dict(module.state_dict())
    x = torch.randn(shape)
    torch.testing.assert_close(module(x), reference(x))


@pytest.mark.parametrize("x, w, pattern", [
    ((1, 3, 5, 5), (0, 3, 3, 3), r"^boo_conv: Given groups=1, expected weight to be at least 1 at dimension 0"),
    ((1, 3, 0, 5), (4, 3, 1, 1), r"^boo_conv: Calculated padded input size per channel: \(0 x 5\)"),
    ((1, 3, 5, 5), (4, 3, 0, 3), r"^boo_conv: kernel size should be greater than zero"),
])
def test_empty_tensors_torch_refuses_are_argument_errors(x, w, pattern, no_kernels):
    with pytest.raises(ArgumentError, match=pattern):
        boo_conv(torch.randn(x), torch.randn(w))


def test_empty_batches_are_differentiable_like_torch(no_kernels):
    x, w = torch.randn(0, 3, 5, 5, requires_grad=True), torch.randn(4, 3, 3, 3, requires_grad=True)
    boo_conv(x, w).sum().backward()
    assert x.grad.shape == x.shape and torch.equal(w.grad, torch.zeros_like(w))
    dx, dw, db = boo_conv_backward(torch.randn(0, 4, 3, 3), x.detach(), w.detach())
    assert dx.shape == (0, 3, 5, 5) and torch.equal(dw, torch.zeros(4, 3, 3, 3)) and torch.equal(db, torch.zeros(4))


# -- launchables: get_launchable ----------------------------------------------------------------------

@dataclass(frozen=True)
class RowSum(Signature):
    """A test op that allows empty tensors: the sums of the rows of an (m, k) matrix."""

    op_name: ClassVar[str] = "rowsum"
    m: int
    k: int

    def readable_name(self) -> str:
        return f"rowsum_m{self.m}_k{self.k}"

    def input_specs(self):
        return [TensorSpec("x", (self.m, self.k), torch.float32)]

    def output_specs(self):
        return [TensorSpec("y", (self.m,), torch.float32)]

    def reference(self, x):
        return x.sum(1)

    @property
    def flops(self) -> int:
        return self.m * self.k


@pytest.mark.parametrize("m, k", [(0, 5), (3, 0), (0, 0)])
def test_a_signature_with_an_empty_tensor_gets_no_kernel(m, k, no_kernels):
    launchable = get_launchable(RowSum(m, k))
    assert isinstance(launchable, EmptyLaunchable) and launchable.formulation == "none (empty tensors)"
    x = torch.randn(m, k)
    assert torch.equal(launchable(x), x.sum(1))  # k = 0: zeros, computed by PyTorch
    out = torch.full((m,), 7.0)
    assert launchable(x, out=out) is out and torch.equal(out, x.sum(1))
    with pytest.raises(ArgumentError, match=rf"^rowsum_m{m}_k{k}: argument 0 \(x\) has shape \(1, 1\)"):
        launchable(torch.randn(1, 1))


@pytest.mark.parametrize("signature, pattern", [
    (RowSum(-1, 3), r"^get_launchable: rowsum_m_1_k3: tensor x of shape \(-1, 3\) has a size of -1$"),
    (RowSum(2**40, 2**20), r"^get_launchable: rowsum_m1099511627776_k1048576: tensor x of shape "
                           r"\(1099511627776, 1048576\) would take 4\.61e\+18 bytes"),
])
def test_get_launchable_refuses_impossible_tensors(signature, pattern, no_kernels):
    with pytest.raises(ArgumentError, match=pattern):
        get_launchable(signature)


def test_get_launchable_takes_a_command_string(private_cache):
    launchable = get_launchable("softmax -n 2 -c 3 -H 1 -W 1 -F 1")
    assert launchable.signature == BooOpRegistry.parse_command("softmax -n 2 -c 3 -H 1 -W 1 -F 1")
    with pytest.raises(CommandError, match=r"^command runs 2 kernels \(softmax_fwd_\w+, softmax_bwd_\w+\); use "
                                           r"parse_signatures\(\)"):
        get_launchable("softmax -n 2 -c 3 -H 1 -W 1 -F 0")
    with pytest.raises(CommandError, match=r"^cannot split the command into arguments: No closing quotation$"):
        get_launchable('softmax -n "2')


@pytest.mark.parametrize("value, name", [(42, "int"), (None, "NoneType"), (b"conv", "bytes"), (["conv"], "list")])
def test_get_launchable_refuses_what_is_neither_a_signature_nor_a_command(value, name, no_kernels):
    with pytest.raises(ArgumentError, match=rf"^get_launchable takes a Signature or a command string, got {name}$"):
        get_launchable(value)


# -- launchables: property-based argument checks ------------------------------------------------------

COMMANDS = {
    "conv": "conv -n 2 -c 4 -H 5 -W 5 -k 3 -y 3 -x 3 -F 1 -b 1",
    "matmul": "gemm -m 3 -n 4 -k 5 -B 0.5 --bias 1",
    "layernorm": "layernorm -X 3x4 -o 1 -m 1 -F 1",
    "softmax": "softmax -n 2 -c 3 -H 2 -W 2 -F 1",
}
MUTATIONS = ("none", "shape", "rank", "dtype", "device", "sparse", "csr", "mkldnn", "strided", "list", "none_value",
             "neg", "expanded")


def mutate(tensor: torch.Tensor, kind: str) -> object:
    """``tensor`` made wrong in one way (``none``: as it is)."""
    if kind == "shape":
        return torch.randn(*tensor.shape[:-1], tensor.shape[-1] + 1).to(tensor.dtype)
    if kind == "rank":
        return tensor.unsqueeze(0)
    if kind == "dtype":
        return tensor.to(f64 if tensor.dtype != f64 else f32)
    if kind == "device":
        return tensor.to("meta")
    if kind == "sparse":
        return tensor.to_sparse()
    if kind == "csr":
        return tensor.to_sparse_csr() if tensor.dim() == 2 else tensor.to_sparse()
    if kind == "mkldnn":
        return tensor.to_mkldnn()
    if kind == "strided":
        return torch.stack([tensor, tensor], dim=-1)[..., 0]
    if kind == "list":
        return tensor.tolist()
    if kind == "none_value":
        return None
    if kind == "neg":
        return torch._neg_view(tensor)
    if kind == "expanded":
        return tensor.flatten()[:1].expand(tensor.shape)
    return tensor


PROBLEMS = {
    "shape": r"has shape", "rank": r"has shape", "dtype": r"has dtype", "device": r"is on meta",
    "sparse": r"has layout torch.sparse_coo; the kernel reads dense \(torch.strided\) tensors",
    "csr": r"has layout torch.sparse_(csr|coo); the kernel reads dense \(torch.strided\) tensors",
    "mkldnn": r"has layout torch._mkldnn; the kernel reads dense \(torch.strided\) tensors \(Cannot access data",
    "strided": r"is not contiguous", "list": r"must be a torch.Tensor, got list",
    "none_value": r"must be a torch.Tensor, got NoneType",
    "neg": r"is a lazily negated or conjugated view", "expanded": r"is not contiguous",
}


@pytest.fixture(scope="module")
def launchables():
    return {op: get_launchable(command) for op, command in COMMANDS.items()}


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta state")
@pytest.mark.parametrize("op", sorted(COMMANDS))
def test_launchable_arguments_property(op, launchables):
    """Each argument is drawn as it should be or wrong in one way; the call computes the
    right values when nothing is wrong, and otherwise raises an ArgumentError naming the
    first wrong argument, before the kernel runs (outputs poisoned with NaN stay NaN)."""
    launchable = launchables[op]
    specs = launchable.signature.input_specs()
    name = launchable.signature.func_name

    @settings(max_examples=30, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(st.sampled_from(MUTATIONS), min_size=len(specs), max_size=len(specs)),
           st.sampled_from(("exact", "fewer", "more")))
    def check(kinds, count):
        good = launchable.signature.get_sample_args(seed=0)
        args = [mutate(arg, kind) for arg, kind in zip(good, kinds)]
        if count == "fewer":
            args = args[:-1]
        elif count == "more":
            args = [*args, good[0]]
        outputs = tuple(torch.full(s.shape, float("nan"), dtype=s.dtype) for s in launchable.signature.output_specs())
        if count != "exact":
            with pytest.raises(ArgumentError, match=rf"^{name} takes {len(specs)} tensors \(.+\), got {len(args)}$"):
                launchable(*args, out=outputs)
        elif all(kind == "none" for kind in kinds):
            assert all(c.passed for c in check_launchable(launchable, args))
        else:
            # MKL-DNN tensors pass the checks (they say they are contiguous) and fail when imported,
            # after every argument was checked: another wrong argument is named first.
            wrong = [i for i, kind in enumerate(kinds) if kind != "none"]
            index = next((i for i in wrong if kinds[i] != "mkldnn"), wrong[0])
            pattern = rf"^{name}: argument {index} \({specs[index].name}\) {PROBLEMS[kinds[index]]}"
            with pytest.raises(ArgumentError, match=pattern):
                launchable(*args, out=outputs)
            assert all(torch.isnan(o).all() for o in outputs if o.is_floating_point())

    check()


@pytest.mark.parametrize("op", sorted(COMMANDS))
def test_launchable_out_property(op, launchables):
    """``out=`` tensors drawn right or wrong (shape, dtype, device, strides, an unaligned
    view, memory shared with an input): wrong ones are refused by name before the kernel."""
    launchable = launchables[op]
    signature = launchable.signature
    name = signature.func_name
    args = signature.get_sample_args(seed=1)
    out_specs = signature.output_specs()

    def make(spec: TensorSpec, kind: str) -> torch.Tensor:
        good = torch.empty(spec.shape, dtype=spec.dtype)
        if kind == "unaligned":
            return torch.empty(good.numel() + 1, dtype=spec.dtype)[1:].view(spec.shape)
        if kind == "alias":
            same = [a for a in args if a.shape == spec.shape and a.dtype == spec.dtype]
            return same[0] if same else good
        return mutate(good, kind) if kind in ("shape", "dtype", "device", "strided") else good

    @settings(max_examples=25, deadline=None, derandomize=True, database=None)
    @given(st.lists(st.sampled_from(("good", "shape", "dtype", "device", "strided", "unaligned", "alias")),
                    min_size=len(out_specs), max_size=len(out_specs)))
    def check(kinds):
        outs = [make(spec, kind) for spec, kind in zip(out_specs, kinds)]
        aliasing = [isinstance(o, torch.Tensor) and any(o is a for a in args) for o in outs]
        bad = [i for i, kind in enumerate(kinds) if kind not in ("good", "alias") or aliasing[i]]
        if not bad:
            launchable(*args, out=outs)
            return
        # Each out= tensor is checked alone first; memory shared with an input is checked last.
        lone = [i for i in bad if not aliasing[i]]
        where = lone[0] if lone else bad[0]
        problem = {"shape": "has shape", "dtype": "has dtype", "device": "is on meta", "strided": "is not contiguous",
                   "unaligned": "is not 64-byte aligned"}[kinds[where]] if lone else "shares memory with argument"
        pattern = rf"^{name}: out\[{where}\] \({out_specs[where].name}\) {problem}" if lone else \
            rf"^{name}: out\[{where}\] {problem}"
        with pytest.raises(ArgumentError, match=pattern):
            launchable(*args, out=outs)

    check()


def test_out_must_be_tensors(launchables):
    launchable = launchables["softmax"]
    (x,) = launchable.signature.get_sample_args(seed=0)
    with pytest.raises(ArgumentError, match=r"^softmax_fwd_\w+ writes 1 outputs, out= has a int$"):
        launchable(x, out=3)
    with pytest.raises(ArgumentError, match=r"^softmax_fwd_\w+: out\[0\] shares memory with argument 0; the kernel "
                                            r"cannot write a tensor it reads"):
        launchable(x, out=x)


def test_torch_compile_leaves_empty_batches_to_pytorch(private_cache):
    """A plain ValueError from a signature used to escape the backend: BackendCompilerFailed."""
    import warnings

    import boo_core.dynamo
    from boo_core import BooFallbackWarning

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(144, 5))
    boo_core.dynamo.reset_offload_summary()
    x = torch.randn(0, 3, 8, 8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = torch.compile(model, backend="iree_boo", dynamic=False)(x)
    assert y.shape == (0, 5)
    assert any(issubclass(w.category, BooFallbackWarning) and "sizes must be positive" in str(w.message)
               for w in caught)
    reasons = boo_core.dynamo.offload_summary().graphs[0].reasons
    assert any("ArgumentError: boo_conv: sizes must be positive: input (0, 3, 8, 8)" in r for r in reasons.values())
