"""``boo_softmax``: results and gradients against PyTorch in float64, both backward paths."""

from __future__ import annotations

import pytest
import torch

from boo_core.plugin import ArgumentError, UnsupportedError, compare, settings_override
from boo_ops_softmax import SoftmaxSignature, boo_softmax

f32, f16, bf16 = torch.float32, torch.float16, torch.bfloat16

# (shape, dim, log, dtype)
CASES = [
    ((6, 10), -1, False, f32),
    ((2, 5, 3), 1, True, f32),
    ((7,), 0, False, bf16),
    ((3, 4, 9), -1, True, f16),
]


def torch_softmax(x: torch.Tensor, dim: int, log: bool) -> torch.Tensor:
    return (torch.log_softmax if log else torch.softmax)(x.double(), dim)


@pytest.mark.parametrize("shape, dim, log, dtype", CASES)
def test_boo_softmax_matches_pytorch(shape, dim, log, dtype):
    x = torch.randn(shape).to(dtype)
    y = boo_softmax(x, dim, log=log)
    assert y.dtype == dtype and y.shape == x.shape
    result = compare("y", y, torch_softmax(x, dim, log), accumulation_length=shape[dim])
    assert result.passed, str(result)


def test_non_contiguous_inputs():
    x = torch.randn(10, 6).t()
    assert compare("y", boo_softmax(x, 0), torch_softmax(x, 0, False), accumulation_length=6).passed


@pytest.mark.parametrize("backward_kernels", [False, True])
@pytest.mark.parametrize("shape, dim, log, dtype", CASES[:2])
def test_gradients_match_pytorch_with_either_backward(shape, dim, log, dtype, backward_kernels):
    x = torch.randn(shape).to(dtype).requires_grad_()
    dy = torch.randn(shape).to(dtype)
    with settings_override(use_backward_kernels=backward_kernels):
        boo_softmax(x, dim, log=log).backward(dy)
    x64 = x.detach().double().requires_grad_()
    torch_softmax(x64, dim, log).backward(dy.double())
    result = compare("dx", x.grad, x64.grad, accumulation_length=shape[dim])
    assert result.passed, str(result)


def test_the_backward_kernel_runs_only_when_the_setting_asks(monkeypatch):
    x = torch.randn(4, 5, requires_grad=True)
    with settings_override(use_backward_kernels=True):
        boo_softmax(x).sum().backward()  # compiles the backward kernel (from the reference)

    def pytorch_backward(self, *args):
        raise AssertionError("the backward ran in PyTorch")

    monkeypatch.setattr(SoftmaxSignature, "reference", pytorch_backward)
    with settings_override(use_backward_kernels=True):
        boo_softmax(x).sum().backward()
    with settings_override(use_backward_kernels=False), pytest.raises(AssertionError, match="ran in PyTorch"):
        boo_softmax(x).sum().backward()


@pytest.mark.parametrize("x, dim, message", [
    (torch.randn(3, 4), 2, r"^boo_softmax: dim 2 is out of range for a 2-D tensor$"),
    (torch.tensor(1.0), 1, r"^boo_softmax: dim 1 is out of range for a 0-D tensor$"),
    ([1.0, 2.0], 0, r"^boo_softmax: x must be a torch.Tensor, got list$"),
    (torch.randn(3, 4), 1.0, r"^boo_softmax: dim must be an int, got 1.0$"),
])
def test_bad_arguments_are_refused(x, dim, message):
    with pytest.raises(ArgumentError, match=message):
        boo_softmax(x, dim)


def test_other_dtypes_are_unsupported():
    with pytest.raises(UnsupportedError, match=r"^softmax dtype torch.float64 is not supported"):
        boo_softmax(torch.randn(3, dtype=torch.float64))


@pytest.mark.parametrize("x, dim", [(torch.randn(0, 4), 1), (torch.randn(3, 0), -1), (torch.tensor(2.5), 0)])
@pytest.mark.parametrize("log", [False, True])
def test_empty_and_0d_inputs_give_pytorchs_result_without_a_kernel(x, dim, log, monkeypatch):
    import boo_ops_softmax.eager

    monkeypatch.setattr(boo_ops_softmax.eager, "launchable_for", lambda *a: pytest.fail("a kernel was asked for"))
    y = boo_softmax(x, dim, log)
    assert y.shape == x.shape and torch.equal(y, (torch.log_softmax if log else torch.softmax)(x, dim))
