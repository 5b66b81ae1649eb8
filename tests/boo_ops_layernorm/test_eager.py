"""``boo_layer_norm`` and ``BooLayerNorm``: results, gradients and drop-in behaviour."""

from __future__ import annotations

import pytest
import torch

from boo_core import ArgumentError
from boo_core.settings import settings_override
from boo_core.verify.numerics import Tolerance, compare
from boo_ops_layernorm import BooLayerNorm, boo_layer_norm, eager

from . import reference

f32, f16, bf16 = torch.float32, torch.float16, torch.bfloat16

# (input shape, normalized shape, weight, bias, dtype); the kernels are test_numerics.py's.
CASES = [
    ((4, 8), (8,), True, True, f32),
    ((2, 5, 6), (5, 6), True, False, f32),
    ((2, 3, 4, 5), (3, 4, 5), False, True, f32),
    ((5, 33), 33, True, True, f16),
    ((4, 3, 17), (3, 17), True, True, bf16),
]


def make(shape, normalized, has_weight, has_bias, dtype, requires_grad=False):
    normalized = (normalized,) if isinstance(normalized, int) else normalized
    x = torch.randn(shape).to(dtype).requires_grad_(requires_grad)
    weight = torch.randn(normalized).to(dtype).requires_grad_(requires_grad) if has_weight else None
    bias = torch.randn(normalized).to(dtype).requires_grad_(requires_grad) if has_bias else None
    return x, weight, bias


@pytest.mark.parametrize("shape, normalized, has_weight, has_bias, dtype", CASES)
def test_boo_layer_norm_matches_an_independent_reference(shape, normalized, has_weight, has_bias, dtype):
    x, weight, bias = make(shape, normalized, has_weight, has_bias, dtype)
    y = boo_layer_norm(x, normalized, weight, bias)
    ndim = 1 if isinstance(normalized, int) else len(normalized)
    result = compare("y", y, reference.forward(x, ndim, weight, bias)[0], accumulation_length=x[0].numel())
    assert result.passed, str(result)
    assert y.dtype == dtype and y.shape == x.shape


def test_non_contiguous_inputs_are_normalized_correctly():
    x = torch.randn(8, 4).t()
    weight, bias = torch.randn(16)[::2], torch.randn(8)
    assert not x.is_contiguous() and not weight.is_contiguous()
    y = boo_layer_norm(x, (8,), weight, bias)
    assert compare("y", y, reference.forward(x, 1, weight, bias)[0], accumulation_length=8).passed


@pytest.mark.parametrize("call, pattern", [
    (lambda: boo_layer_norm(torch.randn(4, 8), (4,)), r"boo_layer_norm: normalized_shape \[4\] must be the trailing "
                                                       r"dims of x \(shape \[4, 8\]\)"),
    (lambda: boo_layer_norm(torch.randn(4, 8), (2, 4, 8)), r"normalized_shape \[2, 4, 8\] must be the trailing dims"),
    (lambda: boo_layer_norm(torch.randn(4, 8), (8,), torch.randn(7)),
     r"boo_layer_norm: weight has shape \[7\], expected the normalized shape \[8\]"),
    (lambda: boo_layer_norm(torch.randn(4, 8), (8,), None, torch.randn(8, dtype=torch.float64)),
     r"boo_layer_norm: bias has dtype torch.float64, x has torch.float32; they must match"),
    (lambda: boo_layer_norm(torch.ones(4, 8, dtype=torch.int32), (8,)),
     r"boo_layer_norm: x has dtype torch.int32; expected float32, float16 or bfloat16"),
])
def test_bad_arguments_are_refused(call, pattern):
    with pytest.raises(ArgumentError, match=pattern):
        call()


def _forbid(monkeypatch, name: str) -> None:
    def fail(*args, **kwargs):
        raise AssertionError(f"{name} must not run")

    monkeypatch.setattr(eager, name, fail)


@pytest.mark.parametrize("use_backward_kernels, forbidden", [(False, "_boo_backward"), (True, "_torch_backward")])
@pytest.mark.parametrize("shape, normalized, dtype", [((4, 8), (8,), f32), ((4, 3, 17), (3, 17), bf16)])
def test_gradients_match_autograd_in_float64(monkeypatch, use_backward_kernels, forbidden, shape, normalized, dtype):
    _forbid(monkeypatch, forbidden)
    x, weight, bias = make(shape, normalized, True, True, dtype, requires_grad=True)
    dy = torch.randn(shape).to(dtype)
    with settings_override(use_backward_kernels=use_backward_kernels):
        boo_layer_norm(x, normalized, weight, bias).backward(dy)
    expected = reference.backward(dy, x.detach(), len(normalized), weight.detach(), bias.detach())
    row_length = weight.numel()
    lengths = {"dx": row_length, "dw": x.numel() // row_length, "db": x.numel() // row_length}
    for name, tensor in (("dx", x), ("dw", weight), ("db", bias)):
        assert tensor.grad.dtype == dtype
        tolerance = None
        if dtype == bf16 and not use_backward_kernels:
            # PyTorch's CPU backward takes mean and rstd in x's dtype: bfloat16 rstd costs digits.
            tolerance = Tolerance(rtol=0.05, atol=0.05 * expected[name].abs().max().item())
        result = compare(name, tensor.grad, expected[name], accumulation_length=lengths[name], tolerance=tolerance)
        assert result.passed, str(result)


def test_only_the_gradients_autograd_needs_are_computed(monkeypatch):
    _forbid(monkeypatch, "_torch_backward")
    x, weight, bias = make((4, 8), (8,), True, True, f32, requires_grad=True)
    weight.requires_grad_(False)
    dy = torch.randn(4, 8)
    with settings_override(use_backward_kernels=True):
        boo_layer_norm(x, (8,), weight, bias).backward(dy)
    expected = reference.backward(dy, x.detach(), 1, weight, bias.detach())
    assert weight.grad is None
    assert compare("dx", x.grad, expected["dx"], accumulation_length=8).passed
    assert compare("db", bias.grad, expected["db"], accumulation_length=4).passed


def test_no_autograd_record_without_gradients():
    x, weight, bias = make((4, 8), (8,), True, True, f32, requires_grad=True)
    with torch.no_grad():
        y = boo_layer_norm(x, (8,), weight, bias)
    assert y.grad_fn is None and not y.requires_grad
    assert boo_layer_norm(x, (8,), weight, bias).grad_fn is not None


# -- BooLayerNorm -----------------------------------------------------------------------------------


def test_module_is_a_drop_in_for_torch_layer_norm():
    torch_module = torch.nn.LayerNorm(8)
    with torch.no_grad():
        torch_module.weight.normal_()
        torch_module.bias.normal_()
    module = BooLayerNorm(8)
    assert isinstance(module, torch.nn.LayerNorm)
    assert module.state_dict().keys() == torch_module.state_dict().keys() == {"weight", "bias"}
    module.load_state_dict(torch_module.state_dict())
    x = torch.randn(4, 8)
    y = module(x)
    torch.testing.assert_close(y, torch_module(x), rtol=1e-5, atol=1e-5)
    y.sum().backward()
    torch_module(x).sum().backward()
    torch.testing.assert_close(module.weight.grad, torch_module.weight.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(module.bias.grad, torch_module.bias.grad, rtol=1e-5, atol=1e-5)
    torch_module.load_state_dict(module.state_dict())


@pytest.mark.parametrize("kwargs, parameters", [
    ({"elementwise_affine": False}, set()),
    ({"bias": False}, {"weight"}),
    ({"dtype": bf16, "eps": 1e-3}, {"weight", "bias"}),
])
def test_module_takes_layer_norms_arguments(kwargs, parameters):
    module, torch_module = BooLayerNorm(8, **kwargs), torch.nn.LayerNorm(8, **kwargs)
    assert {name for name, _ in module.named_parameters()} == parameters
    assert module.state_dict().keys() == torch_module.state_dict().keys()
    assert repr(module) == repr(torch_module).replace("LayerNorm", "BooLayerNorm")
    x = torch.randn(4, 8).to(kwargs.get("dtype", f32))
    tolerance = 2e-2 if "dtype" in kwargs else 1e-5
    torch.testing.assert_close(module(x), torch_module(x), rtol=tolerance, atol=tolerance)
