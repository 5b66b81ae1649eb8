"""Forward convolution numerics against PyTorch in float64, on fresh random inputs."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F

from boo_core import ArgumentError, get_launchable
from boo_core.numerics import compare
from boo_core.testing import assert_numerics
from boo_ops_conv import ConvSignature, boo_conv

f32, f16, bf16 = torch.float32, torch.float16, torch.bfloat16


@dataclass(frozen=True)
class Case:
    n: int
    c: int
    h: int
    w: int
    k: int
    y: int
    x: int
    stride: int | tuple[int, int] = 1
    padding: int | tuple[int, int] = 0
    dilation: int | tuple[int, int] = 1
    groups: int = 1
    layouts: tuple[str, str, str] = ("NCHW", "NCHW", "NCHW")
    dtype: torch.dtype = f32
    bias: bool = False

    def signature(self) -> ConvSignature:
        return ConvSignature((self.n, self.c, self.h, self.w), (self.k, self.c // self.groups, self.y, self.x),
                             stride=self.stride, padding=self.padding, dilation=self.dilation, groups=self.groups,
                             dtype=self.dtype, input_layout=self.layouts[0], kernel_layout=self.layouts[1],
                             output_layout=self.layouts[2], bias=self.bias)


NHWC = ("NHWC",) * 3
CASES = [
    Case(2, 8, 8, 8, 4, 3, 3, padding=1),
    Case(1, 3, 7, 9, 5, 3, 3, stride=2, padding=1, bias=True),  # odd sizes, stride 2
    Case(2, 4, 11, 13, 6, 5, 3, stride=(2, 3), padding=(2, 0), layouts=NHWC),  # asymmetric everything
    Case(1, 6, 9, 9, 6, 3, 3, padding=2, dilation=2),
    Case(2, 8, 10, 10, 8, 3, 3, padding=1, groups=2, layouts=NHWC, bias=True),
    Case(1, 8, 9, 7, 8, 3, 3, stride=2, padding=1, groups=8),  # depthwise
    Case(2, 16, 6, 6, 32, 1, 1, layouts=NHWC, dtype=bf16),  # 1x1
    Case(2, 16, 8, 8, 8, 3, 3, padding=1, layouts=NHWC, dtype=bf16, bias=True),  # 3x3 NHWC padded
    Case(1, 5, 12, 12, 7, 3, 3, stride=3, layouts=("NHWC", "NCHW", "NHWC"), dtype=f16),  # mixed layouts
    Case(1, 4, 8, 8, 4, 3, 3, padding=1, layouts=("NCHW", "NHWC", "NHWC"), dtype=f16, bias=True),
    Case(2, 12, 5, 5, 12, 5, 5, padding=2, groups=3, layouts=("NHWC", "NHWC", "NCHW"), dtype=bf16),
    Case(3, 3, 16, 16, 8, 7, 7, stride=2, padding=3, dtype=f16),  # stem
    Case(1, 2, 1, 1, 3, 1, 1, bias=True),  # 1x1 spatial
    Case(1, 4, 10, 10, 4, 2, 2, stride=3, layouts=NHWC),  # window smaller than stride
    Case(1, 4, 9, 9, 4, 5, 5, stride=2, padding=2, dilation=2, dtype=bf16),  # window larger than stride
    Case(2, 4, 6, 6, 3, 3, 3, padding=1, layouts=("CHWN",) * 3),
]


def to_nchw(t: torch.Tensor, layout: str) -> torch.Tensor:
    return t.permute([layout.index(letter) for letter in "NCHW"])


def from_nchw(t: torch.Tensor, layout: str) -> torch.Tensor:
    return t.permute(["NCHW".index(letter) for letter in layout])


def independent_reference(case: Case, x, w, b):
    """F.conv2d in float64 on NCHW views, written without the plugin's code."""
    y = F.conv2d(to_nchw(x, case.layouts[0]).double(), to_nchw(w, case.layouts[1]).double(),
                 None if b is None else b.double(), case.stride, case.padding, case.dilation, case.groups)
    return from_nchw(y, case.layouts[2])


def ids(case: Case) -> str:
    return case.signature().func_name


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_launchable_matches_float64_reference_with_poisoned_outputs(case):
    assert_numerics(case.signature())


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_boo_conv_matches_independent_reference(case):
    signature = case.signature()
    x, w, *rest = signature.get_sample_args()
    b = rest[0] if rest else None
    y = boo_conv(x, w, b, stride=case.stride, padding=case.padding, dilation=case.dilation, groups=case.groups,
                 input_layout=case.layouts[0], kernel_layout=case.layouts[1], output_layout=case.layouts[2])
    expected = independent_reference(case, x, w, b)
    result = compare("y", y, expected, accumulation_length=case.c // case.groups * case.y * case.x)
    assert result.passed, str(result)


def test_shared_layout_sets_all_three():
    signature = ConvSignature((1, 4, 8, 8), (2, 4, 3, 3), shared_layout="NHWC", output_layout="NCHW")
    assert (signature.input_layout, signature.kernel_layout, signature.output_layout) == ("NHWC", "NHWC", "NCHW")
    x = torch.randn(1, 8, 8, 4)
    w = torch.randn(2, 3, 3, 4)
    y = boo_conv(x, w, shared_layout="NHWC", output_layout="NCHW")
    expected = F.conv2d(x.permute(0, 3, 1, 2).double(), w.permute(0, 3, 1, 2).double())
    assert compare("y", y, expected, accumulation_length=36).passed


def test_a_wrong_kernel_fails_the_check():
    # The checker must catch a plausible layout bug: a filter read with Y and X swapped.
    signature = Case(1, 4, 6, 6, 4, 3, 3, padding=1).signature()
    x, w = signature.get_sample_args()
    y = get_launchable(signature)(x, w)
    swapped = signature.reference(x.double(), w.double().transpose(2, 3))
    assert not compare("y", y, swapped, accumulation_length=36).passed
    assert compare("y", y, signature.reference(x.double(), w.double()), accumulation_length=36).passed


def test_unwritten_elements_fail_the_check():
    signature = Case(1, 4, 6, 6, 4, 3, 3, padding=1).signature()
    x, w = signature.get_sample_args()
    y = get_launchable(signature)(x, w)
    y.view(-1)[5] = float("nan")
    result = compare("y", y, signature.reference(x.double(), w.double()), accumulation_length=36)
    assert not result.passed and result.bad_elements == 1


def test_boo_conv_rejects_mismatched_arguments():
    with pytest.raises(ArgumentError, match=r"boo_conv: x, w and b must share a dtype"):
        boo_conv(torch.randn(1, 2, 4, 4), torch.randn(2, 2, 3, 3, dtype=torch.float16))
    with pytest.raises(ArgumentError, match=r"boo_conv: x has 4 dims but w has 3"):
        boo_conv(torch.randn(1, 2, 4, 4), torch.randn(2, 2, 3))
    with pytest.raises(ArgumentError, match=r"is not contiguous"):
        boo_conv(torch.randn(1, 4, 4, 2).permute(0, 3, 1, 2), torch.randn(2, 2, 3, 3))


def test_boo_conv_is_differentiable():
    x = torch.randn(2, 3, 6, 6, requires_grad=True)
    w = torch.randn(4, 3, 3, 3, requires_grad=True)
    b = torch.randn(4, requires_grad=True)
    grad = torch.randn(2, 4, 3, 3)
    boo_conv(x, w, b, stride=2, padding=1).backward(grad)
    x2, w2, b2 = (t.detach().clone().requires_grad_() for t in (x, w, b))
    F.conv2d(x2, w2, b2, stride=2, padding=1).backward(grad)
    for got, expected in ((x.grad, x2.grad), (w.grad, w2.grad), (b.grad, b2.grad)):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_flops_and_bytes():
    signature = Case(2, 8, 8, 8, 4, 3, 3, padding=1, bias=True).signature()
    outputs = 2 * 4 * 8 * 8
    assert signature.flops == 2 * outputs * 8 * 9 + outputs
    assert signature.bytes_moved == 4 * (2 * 8 * 64 + 4 * 8 * 9 + 4 + outputs)
    assert signature.accumulation_length == 72 and math.prod(signature.output_shape) == outputs
