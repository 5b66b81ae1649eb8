"""``boo_rms_norm`` and ``BooRMSNorm``: results and gradients against PyTorch in float64, both
backward paths. Shapes and eps match test_rmsnorm_numerics's kernels where they can (one more
kernel: the float32 backward of 6 x 96)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from boo_core.plugin import ArgumentError, UnsupportedError, compare, settings_override
from boo_ops_rmsnorm import BooRMSNorm, RMSNormSignature, boo_rms_norm, rms_norm_signature_for

EPS = 1e-5
#: (x's shape, dtype): 6 x 96 and 5 x 33 rows, as test_rmsnorm_numerics's forward kernels.
CASES = [((2, 3, 96), torch.float32), ((5, 33), torch.bfloat16)]


def pytorch(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x.double(), (x.shape[-1],), weight.double(), EPS)


@pytest.mark.parametrize("shape, dtype", CASES)
def test_boo_rms_norm_matches_pytorch(shape, dtype):
    x, weight = torch.randn(shape).to(dtype), torch.randn(shape[-1]).to(dtype)
    y = boo_rms_norm(x, weight, EPS)
    assert y.dtype == dtype and y.shape == x.shape
    result = compare("y", y, pytorch(x, weight), accumulation_length=shape[-1])
    assert result.passed, str(result)


def test_non_contiguous_inputs_and_the_default_weight():
    x = torch.randn(96, 6).t()
    ones = torch.ones(96)
    assert compare("y", boo_rms_norm(x, None, EPS), pytorch(x, ones), accumulation_length=96).passed


def test_eps_defaults_to_pytorchs():
    assert rms_norm_signature_for(torch.randn(4, 3)).eps == torch.finfo(torch.float32).eps
    assert rms_norm_signature_for(torch.randn(4, 3, dtype=torch.bfloat16)).eps == torch.finfo(torch.bfloat16).eps


@pytest.mark.parametrize("backward_kernels", [False, True])
@pytest.mark.parametrize("shape, dtype", CASES)
def test_gradients_match_pytorch_with_either_backward(shape, dtype, backward_kernels):
    x = torch.randn(shape).to(dtype).requires_grad_()
    weight = torch.randn(shape[-1]).to(dtype).requires_grad_()
    dy = torch.randn(shape).to(dtype)
    with settings_override(use_backward_kernels=backward_kernels):
        boo_rms_norm(x, weight, EPS).backward(dy)
    x64, weight64 = (t.detach().double().requires_grad_() for t in (x, weight))
    pytorch(x64, weight64).backward(dy.double())
    rows = x.numel() // shape[-1]
    for name, actual, expected in (("dx", x.grad, x64.grad), ("dweight", weight.grad, weight64.grad)):
        assert actual.dtype == dtype
        result = compare(name, actual, expected, accumulation_length=max(rows, shape[-1]))
        assert result.passed, str(result)


def test_only_the_gradients_asked_for_are_returned():
    x, weight = torch.randn(6, 96, requires_grad=True), torch.randn(96)
    boo_rms_norm(x, weight, EPS).sum().backward()
    assert x.grad is not None and weight.grad is None


def test_the_backward_kernel_runs_only_when_the_setting_asks(monkeypatch):
    x = torch.randn(6, 96, requires_grad=True)
    weight = torch.randn(96, requires_grad=True)
    with settings_override(use_backward_kernels=True):
        boo_rms_norm(x, weight, EPS).sum().backward()  # compiles the backward kernel first

    def pytorch_backward(self, *args):
        raise AssertionError("the backward ran in PyTorch")

    monkeypatch.setattr(RMSNormSignature, "reference", pytorch_backward)
    with settings_override(use_backward_kernels=True):
        boo_rms_norm(x, weight, EPS).sum().backward()
    with settings_override(use_backward_kernels=False), pytest.raises(AssertionError, match="ran in PyTorch"):
        boo_rms_norm(x, weight, EPS).sum().backward()


def test_the_module_is_a_drop_in_torch_rmsnorm():
    torch_module = torch.nn.RMSNorm((3, 32), eps=EPS)
    torch.nn.init.normal_(torch_module.weight)
    module = BooRMSNorm((3, 32), eps=EPS)
    module.load_state_dict(torch_module.state_dict())
    x = torch.randn(2, 3, 3, 32)  # 6 rows of 96, normalized together
    expected = torch_module.double()(x.double())
    assert compare("y", module(x), expected, accumulation_length=96).passed
    with pytest.raises(RuntimeError, match="normalized_shape"):
        module(torch.randn(2, 4, 32))  # PyTorch's own error for a shape that does not end with (3, 32)


@pytest.mark.parametrize("x, weight, eps, message", [
    ([1.0], None, None, r"^boo_rms_norm: x must be a torch.Tensor, got list$"),
    (torch.tensor(1.0), None, None, r"^boo_rms_norm: x must have at least one dim"),
    (torch.randn(2, 3), torch.randn(4), None, r"^boo_rms_norm: weight has shape \[4\]; expected \[3\], x's last dim$"),
    (torch.randn(2, 3), torch.randn(3, dtype=torch.float16), None,
     r"^boo_rms_norm: weight has dtype torch.float16, x torch.float32; they must match$"),
    (torch.randn(2, 3), None, -1.0, r"^boo_rms_norm: eps must not be negative, got -1.0$"),
    (torch.randn(2, 3), None, "1e-5", r"^boo_rms_norm: eps must be a number, got '1e-5'$"),
])
def test_bad_arguments_are_refused(x, weight, eps, message):
    with pytest.raises(ArgumentError, match=message):
        boo_rms_norm(x, weight, eps)


def test_other_dtypes_are_unsupported():
    with pytest.raises(UnsupportedError, match=r"^boo_rms_norm: x has dtype torch.float64; supported: f32, f16, bf16$"):
        boo_rms_norm(torch.randn(2, 3, dtype=torch.float64))


@pytest.mark.parametrize("shape", [(0, 4), (3, 0)])
def test_empty_inputs_give_pytorchs_result_without_a_kernel(shape, monkeypatch):
    import boo_ops_rmsnorm.eager

    monkeypatch.setattr(boo_ops_rmsnorm.eager, "launchable_for", lambda *a: pytest.fail("a kernel was asked for"))
    x, weight = torch.randn(shape), torch.randn(shape[-1])
    y = boo_rms_norm(x, weight, EPS)
    assert y.shape == x.shape and torch.equal(y, F.rms_norm(x, (shape[-1],), weight, EPS))
