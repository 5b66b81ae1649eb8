"""The Hopper kernel library's convolutions (examples/boo_kernels_hopper) on a Hopper GPU:
ResNet-50 rows of benchmarks/gpu.py (bf16, NHWC, batch 32), forward, data gradient and
weight gradient, are served by its Triton-built sm_90a kernels substituted into IREE's module
(every module shape: one executable, pad + conv, pad + filter copy + conv, filter copy + conv
reading dY unpadded, filter copies + a strided data gradient's phases over dY as stored; for
the weight gradient, [subsample or image +] split-K products + sum, or products reading x
unpadded + sum), verified by BOO, and right against float64. Skipped without the library,
Triton or a GPU of compute capability 9.0.
Run on the GPU machine: ``pytest -m gpu tests/gpu/test_kernel_library_conv.py``."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from boo_core import Target, get_launchable
from boo_ops_conv import ConvSignature

pytestmark = pytest.mark.gpu
ptx = pytest.importorskip("boo_kernels_hopper.ptx")
conv = pytest.importorskip("boo_kernels_hopper.conv")
wgrad = pytest.importorskip("boo_kernels_hopper.wgrad")
hooks = pytest.importorskip("boo_kernels_hopper.hooks")
dgrad = pytest.importorskip("boo_kernels_hopper.dgrad")

DEVICE = "cuda:0"
BF16 = torch.bfloat16
ROWS = [  # (input channels, output channels, window, stride, input size, mode)
    (64, 64, 3, 1, 56, "fwd"),  # padded: pad + conv
    (3, 64, 7, 2, 224, "fwd"),  # the stem: 3 channels, a gathered reduction
    (128, 128, 3, 2, 56, "fwd"),  # padded, strided
    (64, 256, 1, 1, 56, "fwd"),  # one executable (a flattened matmul)
    (512, 1024, 1, 2, 28, "fwd"),  # one executable, strided
    (512, 2048, 1, 1, 7, "fwd"),  # M = 1568: a partial last row of tiles
    (512, 512, 3, 1, 7, "fwd"),  # 52 tiles of 128x128: 64x128 ones (4 warps, 3 stages), x read unpadded
    (512, 512, 3, 2, 14, "fwd"),  # the same, strided
    (64, 64, 3, 1, 56, "bwd"),  # channels_last: filter copy + conv reading dY unpadded (flipped, input-major filter)
    (512, 512, 3, 1, 7, "bwd"),  # the same at 7x7
    (256, 256, 3, 2, 28, "bwd"),  # strided: phase_axes, each phase of dx with its taps over dY as stored
    (128, 128, 3, 2, 56, "bwd"),  # the same at 56x56
    (512, 512, 3, 2, 14, "bwd"),  # the same at 7x7 dY
    (256, 64, 1, 1, 56, "bwd"),  # one executable
    (256, 512, 1, 2, 56, "bwd"),  # strided 1x1: phase_axes, one phase with a tap, three of zeros
    (1024, 2048, 1, 2, 14, "bwd"),  # the same at 7x7 dY
    (256, 512, 1, 2, 15, "bwd"),  # odd: dY copied compact + the conv scattering into dx, its edge blocks cut
]


@pytest.fixture(autouse=True)
def hopper():
    reason = ptx.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)


def signature_of(c: int, k: int, window: int, stride: int, size: int, mode: str, **epilogue: object
                 ) -> ConvSignature:
    return ConvSignature((32, c, size, size), (k, c, window, window), stride=stride, padding=window // 2,
                         dtype=BF16, shared_layout="NHWC", mode=mode, **epilogue)


def row_id(row: tuple) -> str:
    return "{}to{}_{}x{}_s{}_at{}_{}".format(row[0], row[1], row[2], row[2], *row[3:6]) + \
        "".join(f"_{v if v is not True else k}" for k, v in (row[6] if len(row) > 6 else {}).items())


@pytest.mark.parametrize("row", ROWS, ids=row_id)
def test_a_resnet_conv_is_served_by_the_library_kernel(private_cache, row):
    assert_served_and_right(signature_of(*row))


# Forward convolutions with an epilogue: what a batch norm folded into the conv gives (a bias),
# with the activation after it, as torch.compile's inference graphs of ResNets have them.
EPILOGUE_ROWS = [
    (64, 64, 3, 1, 56, "fwd", {"bias": True, "activation": "relu"}),  # pad + conv
    (3, 64, 7, 2, 224, "fwd", {"bias": True, "activation": "relu"}),  # the stem
    (64, 256, 1, 1, 56, "fwd", {"bias": True}),  # one executable, bias alone
    (512, 2048, 1, 1, 7, "fwd", {"bias": True, "activation": "gelu"}),  # partial last row of tiles
    (256, 256, 3, 2, 28, "fwd", {"activation": "silu"}),  # activation alone
    (128, 128, 3, 1, 28, "fwd", {"bias": True, "activation": "sigmoid"}),
    (256, 1024, 1, 1, 14, "fwd", {"bias": True, "activation": "tanh"}),
    (2048, 512, 1, 1, 7, "fwd", {"bias": True, "activation": "relu"}),
]


@pytest.mark.parametrize("row", EPILOGUE_ROWS, ids=row_id)
def test_a_conv_with_a_bias_and_activation_runs_them_in_the_library_kernels_epilogue(private_cache, row):
    assert_served_and_right(signature_of(*row[:6], **row[6]))


# Conv + batch norm (+ bias, ReLU) as torch.compile's inference graphs of channels-last ResNets
# hand them over (the cbainfer op, NHWC): the batch norm in the conv kernel's epilogue.
# (input channels, output channels, window, stride, input size, fusion, residual)
CBA_ROWS = [(64, 64, 3, 1, 56, "cna", False), (3, 64, 7, 2, 224, "cna", False), (64, 256, 1, 1, 56, "cn", False),
            (128, 128, 3, 2, 56, "cbna", False), (512, 2048, 1, 1, 7, "cn", False),
            (1024, 512, 1, 1, 14, "cna", False), (64, 256, 1, 1, 56, "cna", True), (1024, 2048, 1, 2, 14, "cna", True),
            (512, 512, 3, 1, 7, "cna", True), (512, 512, 3, 2, 14, "cbna", False)]


@pytest.mark.parametrize("row", CBA_ROWS,
                         ids=lambda r: "{}to{}_{}x{}_s{}_at{}_{}{}".format(*r[:3], *r[2:6], "_residual" * r[6]))
def test_a_conv_batch_norm_and_relu_run_as_one_library_kernel(private_cache, row):
    assert_served_and_right(cba_signature(*row))


def cba_signature(c: int, k: int, window: int, stride: int, size: int, fusion: str, residual: bool,
                  batch: int = 32):
    from boo_ops_conv import ConvBatchNormActivationSignature

    return ConvBatchNormActivationSignature(
        batch, c, size, size, k=k, fil_h=window, fil_w=window, stride_h=stride, stride_w=stride, pad_h=window // 2,
        pad_w=window // 2, fusion=fusion, bn_mode="spatial", eps=1e-5, dtype=BF16, layout="NHWC", residual=residual)


# Forwards of few output tiles at small batches (a ResNet's late maps): the conv op's split_k
# module, the products in 4 or 8 splits of the reduction, IREE's sum with the epilogue.
# (input channels, output channels, window, stride, input size, batch)
SPLIT_ROWS = [(512, 512, 3, 1, 7, 1), (512, 512, 3, 2, 14, 8), (2048, 512, 1, 1, 7, 8), (256, 256, 3, 1, 14, 1),
              (128, 128, 3, 1, 28, 1),  # 18 steps of the reduction in 4 splits: the last has 3
              (1024, 256, 1, 1, 14, 1)]  # slices of 256 products (4 tiles)


@pytest.mark.parametrize("row", SPLIT_ROWS, ids=lambda r: "{}to{}_{}x{}_s{}_at{}_batch{}".format(*r[:3], *r[2:]))
def test_a_small_batch_forward_runs_its_products_in_splits(private_cache, row):
    c, k, window, stride, size, batch = row
    plain = signature_of(c, k, window, stride, size, "fwd", bias=True, activation="relu")
    assert_served_and_right(dataclasses.replace(plain, input_shape=(batch, c, size, size)))
    assert_served_and_right(cba_signature(c, k, window, stride, size, "cbna", True, batch))


def assert_served_and_right(signature) -> None:
    launchable = get_launchable(signature, DEVICE)
    assert launchable.substitution is not None and launchable.substitution.name == "hopper_conv"
    # a padded forward or stride-1 data gradient: the channels_last module, the padding applied as the kernel reads
    # a strided data gradient: the phase_axes module, each phase of dx computed over dY as stored
    # a forward of few output tiles: the split_k module, its products in splits
    by_phase = dgrad.problem_of(signature) is not None
    split = conv.problem_of(signature).mode == "fwd" and hooks._offers(signature, Target.parse("cuda:sm_90"),
                                                                       hooks.SPLIT_K_FORMULATION)
    reads_unpadded = not by_phase and conv.padding_as_it_reads(conv.problem_of(signature)) is not None
    assert launchable.formulation == ("phase_axes" if by_phase else "split_k" if split else
                                      "channels_last" if reads_unpadded else "default")
    assert launchable.verified and not launchable.passed_over
    assert launchable.launch == "direct"
    inputs = signature.get_sample_args(device=DEVICE)
    reference = signature.reference(*[t.double() for t in inputs])
    for _ in range(2):  # a second call: the transient is reused, padding must be rewritten
        out = launchable(*inputs)
        assert float((out.double() - reference).norm() / reference.norm()) < 1e-2


@pytest.mark.parametrize("row", [(256, 256, 3, 2, 28, "bwd"), (256, 512, 1, 2, 56, "bwd")], ids=row_id)
def test_a_strided_data_gradient_keeps_the_default_modules_kernels_as_its_second_candidate(private_cache, row):
    """Behind the phases' kernel, the library's kernels over the default module (zeros
    inserted into dY; for a 1x1 window dY copied compact and scattered) still verify."""
    signature = signature_of(*row)
    substitutions = [s for s in hooks.conv_candidates(signature, Target.parse("cuda:sm_90"))
                     if s.name == "hopper_conv"]  # each module with its chosen tiles
    assert [s.formulation for s in substitutions] == ["phase_axes", "default"]
    launchable = get_launchable(signature, DEVICE, substitutions=substitutions[-1])
    assert launchable.formulation == "default" and launchable.verified and not launchable.passed_over
    inputs = signature.get_sample_args(device=DEVICE)
    reference = signature.reference(*[t.double() for t in inputs])
    out = launchable(*inputs)
    assert float((out.double() - reference).norm() / reference.norm()) < 1e-2


def test_convs_it_does_not_serve_get_nothing_from_it():
    assert conv.problem_of(signature_of(3, 64, 7, 2, 224, "bwd")) is None  # 3 output channels
    assert conv.problem_of(signature_of(64, 64, 3, 1, 56, "wrw")) is None
    float32 = ConvSignature((32, 64, 56, 56), (64, 64, 3, 3), padding=1, shared_layout="NHWC")
    assert conv.problem_of(float32) is None


WGRAD_ROWS = [  # weight gradients: (input channels, output channels, window, stride, input size, "wrw")
    (64, 64, 1, 1, 56, "wrw"),  # im2col_split32: 32 parts read the op's own tensors; a 64x64 output
    (256, 128, 1, 1, 56, "wrw"),
    (512, 128, 1, 1, 28, "wrw"),  # im2col_split128: 98 parts, 33 of them written, the last split masked
    (256, 512, 1, 2, 56, "wrw"),  # strided: implicit_split, x read at the strided pixels (or subsample + products)
    (2048, 512, 1, 1, 7, "wrw"),  # 1568 pixels: implicit_split (or IREE pads dY and x into a transient first)
    (1024, 2048, 1, 2, 14, "wrw"),  # strided, one split
    (64, 64, 3, 1, 56, "wrw"),  # 3x3: implicit_split, x read unpadded by the products
    (128, 128, 3, 2, 56, "wrw"),  # 3x3 strided
    (256, 256, 3, 1, 14, "wrw"),  # 3x3, the last split masked
    (512, 512, 3, 1, 7, "wrw"),  # 3x3, 1568 pixels
    (3, 64, 7, 2, 224, "wrw"),  # the stem: implicit_split, 147 columns gathered from x unpadded (or 49 taps' copies)
]


@pytest.mark.parametrize("row", WGRAD_ROWS, ids=lambda r: f"{r[0]}to{r[1]}_s{r[3]}_at{r[4]}_wrw")
def test_a_resnet_weight_gradient_is_served_by_the_library_kernels(private_cache, row):
    signature = signature_of(*row)
    problem = wgrad.problem_of(signature)
    implicit = wgrad.reads_x_itself_first(problem)
    launchable = get_launchable(signature, DEVICE)
    assert launchable.formulation == (wgrad.IMPLICIT_FORMULATION if implicit else wgrad.formulation_of(problem))
    assert_weight_gradient_served_and_right(signature, launchable)
    if implicit:  # the library's second candidate, over the columns' module (the padded image moved into it)
        substitution = [s for s in hooks._wgrad_substitutions(signature, Target.parse("cuda:sm_90"), problem)
                        if s.name == "hopper_conv"][-1]  # the columns' module with its chosen tiles
        assert substitution.formulation == wgrad.formulation_of(problem)
        columns = get_launchable(signature, DEVICE, substitutions=substitution)
        assert columns.formulation == substitution.formulation
        assert_weight_gradient_served_and_right(signature, columns)


def assert_weight_gradient_served_and_right(signature, launchable) -> None:
    assert launchable.substitution is not None and launchable.substitution.name == "hopper_conv"
    assert launchable.verified and not launchable.passed_over
    inputs = signature.get_sample_args(device=DEVICE)
    reference = signature.reference(*[t.double() for t in inputs])
    for _ in range(2):
        out = launchable(*inputs)
        assert float((out.double() - reference).norm() / reference.norm()) < 1e-2


def test_weight_gradients_it_does_not_serve_get_nothing_from_it():
    assert wgrad.problem_of(signature_of(3, 64, 1, 1, 56, "wrw")) is None  # 1x1 with 3 channels
