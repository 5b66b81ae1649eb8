"""Convolution numerics in every mode, rank and layout, against float64 PyTorch.

Each case runs the launchable on fresh random inputs into NaN-poisoned outputs and compares
with an independent reference (tests/boo_ops_conv/reference.py) and with the signature's
own reference.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from boo_core import BooOpRegistry, UnsupportedError, get_launchable
from boo_core.testing import assert_numerics
from boo_core.verify.numerics import compare, poisoned
from boo_ops_conv import MODES, ConvSignature, boo_conv

from . import reference
from .representative import pairwise

f32, f16, bf16 = torch.float32, torch.float16, torch.bfloat16


def conv(input_shape, kernel_shape, **kwargs) -> ConvSignature:
    return ConvSignature(tuple(input_shape), tuple(kernel_shape), **kwargs)


def check(signature: ConvSignature) -> None:
    """Poisoned outputs, fresh inputs, the independent reference; then the plugin's own."""
    launchable = get_launchable(signature)
    args = signature.get_sample_args()
    [spec] = signature.output_specs()
    out = poisoned(spec.shape, spec.dtype, "cpu")
    launchable(*args, out=out)
    result = compare(spec.name, out, reference.expected(signature, args),
                     accumulation_length=signature.accumulation_length)
    assert result.passed, f"{signature.to_command()}\n{result}"
    assert_numerics(launchable)


# -- every mode x rank x layout family -------------------------------------------------------------

GEOMETRY = {  # rank: (input shape, ordinary kernel, stride, padding, dilation, groups)
    1: ((2, 4, 11), (6, 2, 3), 2, 1, 1, 2),
    2: ((2, 4, 7, 9), (6, 4, 3, 2), (2, 1), (1, 0), (1, 2), 1),
    3: ((1, 4, 5, 6, 7), (4, 2, 3, 3, 1), (1, 2, 1), 1, 1, 2),
}
CHANNELS_LAST = {1: "NWC", 2: "NHWC", 3: "NDHWC"}
FAMILIES = {  # name: (dtype, layouts(rank) -> (input, kernel, output))
    "first": (f32, lambda r: (reference.LOGICAL[r],) * 3),
    "last": (bf16, lambda r: (CHANNELS_LAST[r],) * 3),
    "mixed": (f16, lambda r: (CHANNELS_LAST[r], reference.LOGICAL[r], CHANNELS_LAST[r])),
}


def matrix_case(rank: int, mode: str, family: str, transposed: bool = False) -> ConvSignature:
    input_shape, kernel_shape, stride, padding, dilation, groups = GEOMETRY[rank]
    if transposed:  # the filter is (C, K/groups, ...)
        kernel_shape = (input_shape[1], kernel_shape[0] // groups, *kernel_shape[2:])
    dtype, layouts = FAMILIES[family]
    i, k, o = layouts(rank)
    return conv(input_shape, kernel_shape, stride=stride, padding=padding, dilation=dilation, groups=groups,
                dtype=dtype, input_layout=i, kernel_layout=k, output_layout=o, mode=mode, transposed=transposed,
                output_padding=1 if transposed and rank == 1 else 0)


#: CI's part of the matrix: every pair of rank, mode and family (representative.pairwise).
ON_CI = pairwise((1, 2, 3), MODES, tuple(FAMILIES))
MATRIX = [pytest.param(*case, id="-".join(map(str, case)), marks=() if case in ON_CI else pytest.mark.slow)
          for case in itertools.product((1, 2, 3), MODES, FAMILIES)]


def test_the_matrix_on_ci_has_every_pair_of_rank_mode_and_family():
    for a, b in itertools.combinations(range(3), 2):
        every_pair = {(x[a], x[b]) for x in itertools.product((1, 2, 3), MODES, FAMILIES)}
        assert {(x[a], x[b]) for x in ON_CI} == every_pair
    assert len(ON_CI) == 3 * len(MODES)


@pytest.mark.parametrize("rank, mode, family", MATRIX)
def test_mode_rank_layout(rank, mode, family):
    check(matrix_case(rank, mode, family))


def transposed_case(rank: int, mode: str) -> ConvSignature:
    return matrix_case(rank, mode, ("first", "last", "mixed")[rank - 1], transposed=True)


@pytest.mark.parametrize("rank, mode", list(itertools.product((1, 2, 3), MODES)), ids=lambda v: str(v))
def test_transposed_mode_rank(rank, mode):
    check(transposed_case(rank, mode))


# -- awkward shapes and features --------------------------------------------------------------------

NHWC = {"shared_layout": "NHWC"}
SPECIAL = {
    # backward-data where the input size is not recoverable from the output size: 9 and 10 both give 5
    "bwd_stride2_odd_input": conv((2, 3, 9, 9), (4, 3, 3, 3), stride=2, padding=1, mode="bwd"),
    "bwd_stride2_even_input": conv((2, 3, 10, 10), (4, 3, 3, 3), stride=2, padding=1, mode="bwd", **NHWC),
    "bwd_stride2_mixed_parity": conv((1, 3, 10, 7), (5, 3, 3, 3), stride=2, mode="bwd", dtype=bf16),
    "wrw_stride2_odd_input": conv((2, 3, 9, 10), (4, 3, 3, 3), stride=2, padding=1, mode="wrw"),
    "bwd_stride3_window1": conv((1, 4, 8, 8), (4, 4, 1, 1), stride=3, mode="bwd"),  # rows never read: dx = 0
    "one_by_one_spatial_fwd": conv((3, 5, 1, 1), (7, 5, 1, 1), bias=True),
    "one_by_one_spatial_bwd": conv((3, 5, 1, 1), (7, 5, 1, 1), mode="bwd"),
    "one_by_one_spatial_wrw": conv((3, 5, 1, 1), (7, 5, 1, 1), mode="wrw"),
    "dilated_fwd": conv((1, 6, 9, 9), (6, 6, 3, 3), padding=2, dilation=2),
    "dilated_bwd": conv((1, 6, 11, 9), (6, 6, 3, 3), dilation=(2, 3), stride=2, mode="bwd", **NHWC),
    "dilated_wrw": conv((1, 6, 11, 9), (6, 6, 3, 3), dilation=(2, 3), stride=2, mode="wrw", dtype=bf16),
    "window_larger_than_stride_bwd": conv((2, 4, 9, 9), (4, 4, 5, 5), stride=2, padding=2, mode="bwd"),
    "window_smaller_than_stride_fwd": conv((1, 4, 10, 10), (4, 4, 2, 2), stride=3, **NHWC),
    "window_smaller_than_stride_wrw": conv((1, 4, 10, 10), (4, 4, 2, 2), stride=3, mode="wrw", **NHWC),
    "depthwise_fwd": conv((2, 8, 9, 7), (8, 1, 3, 3), stride=2, padding=1, groups=8),
    "depthwise_bwd": conv((2, 8, 9, 7), (8, 1, 3, 3), stride=2, padding=1, groups=8, mode="bwd", **NHWC),
    "depthwise_wrw": conv((2, 8, 9, 7), (8, 1, 3, 3), stride=2, padding=1, groups=8, mode="wrw"),
    # IREE 3.13 cannot lower these as they are; the plugin widens each group (see ConvSignature).
    "depthwise_3d_fwd": conv((1, 4, 5, 6, 5), (4, 1, 3, 3, 3), padding=1, groups=4, bias=True),
    "depthwise_3d_bwd": conv((1, 4, 5, 6, 5), (4, 1, 3, 3, 3), stride=2, groups=4, mode="bwd"),
    "depthwise_3d_wrw": conv((1, 4, 5, 6, 5), (4, 1, 3, 3, 3), padding=1, groups=4, mode="wrw"),
    "depthwise_transposed_1d": conv((2, 6, 7), (6, 1, 3), stride=2, groups=6, transposed=True, bias=True),
    "depthwise_transposed_3d": conv((1, 4, 3, 4, 3), (4, 1, 3, 3, 3), stride=2, groups=4, transposed=True,
                                    shared_layout="NDHWC"),
    "many_groups_fwd": conv((2, 32, 6, 6), (64, 2, 3, 3), padding=1, groups=16, dtype=bf16, **NHWC),
    "many_groups_wrw": conv((2, 32, 6, 6), (64, 2, 3, 3), padding=1, groups=16, mode="wrw"),
    "asymmetric_everything": conv((2, 4, 11, 13), (6, 4, 5, 3), stride=(2, 3), padding=(2, 0), **NHWC),
    "mixed_layouts_fwd": conv((1, 5, 12, 12), (7, 5, 3, 3), stride=3, dtype=f16, input_layout="NHWC",
                              output_layout="NHWC"),
    "chwn": conv((2, 4, 6, 6), (3, 4, 3, 3), padding=1, shared_layout="CHWN"),
    "chwn_wrw": conv((2, 4, 6, 6), (3, 4, 3, 3), padding=1, shared_layout="CHWN", mode="wrw"),
    "stem_fp16": conv((3, 3, 16, 16), (8, 3, 7, 7), stride=2, padding=3, dtype=f16),
    "nhwc_3x3_padded_bf16": conv((2, 16, 8, 8), (8, 16, 3, 3), padding=1, dtype=bf16, bias=True, **NHWC),
    "bias_grad_nhwc": conv((2, 16, 8, 8), (8, 16, 3, 3), padding=1, dtype=bf16, mode="bwd_bias", **NHWC),
    "transposed_groups_dilation": conv((2, 6, 5, 4), (6, 2, 3, 3), stride=2, padding=1, dilation=2, groups=3,
                                       output_padding=(1, 0), transposed=True, bias=True),
    "transposed_bwd_odd": conv((1, 4, 5, 5), (4, 3, 3, 3), stride=2, padding=1, output_padding=1, transposed=True,
                               mode="bwd", **NHWC),
}


#: What the numerics tables run on CI, by which the corpus' classes count as covered.
TABLE_ON_CI = ([matrix_case(*case) for case in ON_CI]
               + [transposed_case(*case) for case in itertools.product((1, 2, 3), MODES)] + list(SPECIAL.values()))


@pytest.mark.parametrize("name", SPECIAL)
def test_awkward_shapes(name):
    check(SPECIAL[name])


@pytest.mark.parametrize("signature", sorted({s.func_name: s for s in TABLE_ON_CI if s.mode in ("fwd", "bwd")}.values(),
                                              key=lambda s: s.func_name), ids=lambda s: s.func_name)
def test_the_eager_baseline_computes_what_the_independent_reference_does(signature):
    """Benchmarks time ``eager`` as torch's kernel (the convolution unwidened, and
    convolution_backward for a data gradient): it must be right in every layout, transposed,
    grouped and depthwise."""
    args = signature.get_sample_args()
    got = signature.eager(*(a.double() for a in args))
    torch.testing.assert_close(got, reference.expected(signature, args), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("activation", ["relu", "gelu", "silu", "sigmoid", "tanh"])
def test_bias_and_activation_fuse_into_one_kernel(activation):
    signature = conv((2, 8, 7, 7), (8, 8, 3, 3), padding=1, bias=True, activation=activation,
                     dtype=bf16 if activation == "gelu" else f32, **NHWC)
    check(signature)
    mlir = (get_launchable(signature).cache_directory / "source.mlir").read_text()
    assert "@" + signature.func_name in mlir
    assert mlir.count("func.func") == 1  # one kernel: the activation is in the same function


@pytest.mark.parametrize("command, padding", [
    ("conv -n 2 -c 3 -H 9 -W 10 -k 4 -y 3 -x 3 -u 2 -v 2 --pad_mode same -F 1", (1, 0)),
    ("conv -n 2 -c 3 -H 9 -W 10 -k 4 -y 3 -x 3 -p 2 -q 2 --pad_mode valid -F 2", (0, 0)),
    ("conv -n 2 -c 3 -H 9 -W 10 -k 4 -y 5 -x 5 --pad_mode same -F 4 --in_layout NHWC", (2, 2)),
])
def test_pad_modes_from_commands(command, padding):
    signature = BooOpRegistry.parse_command(command)
    assert signature.padding == padding
    check(signature)


# -- boo_conv ---------------------------------------------------------------------------------------


def test_boo_conv_with_explicit_layouts_takes_physical_tensors():
    x = torch.randn(1, 8, 8, 4)
    w = torch.randn(2, 3, 3, 4)
    y = boo_conv(x, w, shared_layout="NHWC", output_layout="NCHW")
    assert y.shape == (1, 2, 6, 6)
    expected = F.conv2d(x.permute(0, 3, 1, 2).double(), w.permute(0, 3, 1, 2).double())
    assert compare("y", y, expected, accumulation_length=36).passed


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_boo_conv_matches_torch_functional(rank):
    x = torch.randn(2, 4, *(7,) * rank)
    w = torch.randn(6, 2, *(3,) * rank)
    b = torch.randn(6)
    functional = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[rank]
    y = boo_conv(x, w, b, stride=2, padding=1, groups=2)
    expected = functional(x.double(), w.double(), b.double(), stride=2, padding=1, groups=2)
    assert compare("y", y, expected, accumulation_length=2 * 3**rank).passed


def test_a_wrong_kernel_fails_the_check():
    # The checker must catch a plausible layout bug: a filter read with Y and X swapped.
    signature = conv((1, 4, 6, 6), (4, 4, 3, 3), padding=1)
    x, w = signature.get_sample_args()
    y = get_launchable(signature)(x, w)
    swapped = signature.reference(x.double(), w.double().transpose(2, 3))
    assert not compare("y", y, swapped, accumulation_length=36).passed
    assert compare("y", y, signature.reference(x.double(), w.double()), accumulation_length=36).passed


def test_unwritten_elements_fail_the_check():
    signature = conv((1, 4, 6, 6), (4, 4, 3, 3), padding=1)
    x, w = signature.get_sample_args()
    y = get_launchable(signature)(x, w)
    y.view(-1)[5] = float("nan")
    result = compare("y", y, signature.reference(x.double(), w.double()), accumulation_length=36)
    assert not result.passed and result.bad_elements == 1


@pytest.mark.parametrize("make, pattern", [
    (lambda: conv((1, 4, 6, 6), (4, 4, 3, 3), mode="bwd", activation="relu"),
     r"activation fuses into the forward convolution only, not mode 'bwd'"),
    (lambda: conv((1, 4, 6, 6), (4, 4, 3, 3), activation="swish"), r"activation 'swish' is not supported"),
    (lambda: conv((1, 4, 6, 6), (4, 4, 3, 3), dtype=torch.int8), r"conv dtype torch.int8 is not supported"),
    (lambda: conv((1, 4, 2, 2, 2, 2), (4, 4, 1, 1, 1, 1)), r"4-D convolution is not supported"),
    (lambda: conv((1, 4, 6, 6), (4, 4, 3, 3), input_layout="NCWH", shared_layout="NDHWC"),
     r"kernel_layout 'NDHWC' is not a 2-D layout"),
    (lambda: boo_conv(torch.randn(1, 4, 6, 6), torch.randn(4, 4, 3, 3), padding="same", transposed=True),
     r"padding='same' is not supported for transposed convolutions"),
])
def test_unsupported_combinations_raise_unsupported_error(make, pattern):
    with pytest.raises(UnsupportedError, match=pattern):
        make()


@pytest.mark.parametrize("make, pattern", [
    (lambda: conv((1, 4, 6, 6), (4, 4, 3, 3), mode="bwd", bias=True), r"bias=True describes a forward input"),
    (lambda: conv((1, 4, 6, 6), (4, 4, 3, 3), output_padding=1), r"output_padding applies to transposed"),
    (lambda: conv((1, 4, 6, 6), (4, 4, 3, 3), mode="dgrad"), r"mode 'dgrad' is not one of fwd, bwd, wrw, bwd_bias"),
    (lambda: conv((1, 6, 6, 6), (4, 4, 3, 3)), r"input channels 6 must equal kernel_shape\[1\] \* groups = 4"),
    (lambda: conv((1, 4, 6, 6), (4, 2, 3, 3), transposed=True, stride=2, output_padding=2),
     r"output_padding \(2, 2\) must be smaller than the stride \(2, 2\) or the dilation"),
    (lambda: boo_conv(torch.randn(1, 2, 4, 4), torch.randn(2, 2, 3, 3, dtype=torch.float16)),
     r"boo_conv: w has dtype torch.float16, x torch.float32; they must match"),
    (lambda: boo_conv(torch.randn(1, 2, 4, 4), torch.randn(2, 2, 3)), r"x has 4 dims and w has 3"),
    (lambda: boo_conv(torch.randn(1, 2, 4, 4), torch.randn(2, 2, 3, 3), padding="full"),
     r"padding 'full' must be an int, a tuple, 'valid' or 'same'"),
    (lambda: boo_conv(torch.randn(1, 2, 8, 8), torch.randn(2, 2, 3, 3), padding="same", stride=2),
     r"padding='same' needs stride 1"),
])
def test_invalid_arguments_raise_value_errors(make, pattern):
    with pytest.raises(ValueError, match=pattern):
        make()


def test_flops_bytes_and_accumulation():
    signature = conv((2, 8, 8, 8), (4, 8, 3, 3), padding=1, bias=True)
    outputs = 2 * 4 * 8 * 8
    assert signature.flops == 2 * outputs * 8 * 9 + outputs
    assert signature.bytes_moved == 4 * (2 * 8 * 64 + 4 * 8 * 9 + 4 + outputs)
    assert signature.accumulation_length == 72 and math.prod(signature.output_shape) == outputs
    wrw = conv((2, 8, 8, 8), (4, 8, 3, 3), padding=1, mode="wrw")
    assert wrw.flops == 2 * outputs * 8 * 9 and wrw.accumulation_length == 2 * 64
    transposed = conv((2, 8, 5, 5), (8, 3, 3, 3), stride=2, transposed=True)
    assert transposed.output_shape == (2, 3, 11, 11) and transposed.macs == 2 * 8 * 25 * 3 * 9
