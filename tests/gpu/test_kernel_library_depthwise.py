"""The Hopper kernel library's depthwise convolutions (examples/boo_kernels_hopper,
``depthwise``) on a Hopper GPU: ConvNeXt-T's 7x7 rows (bf16, NHWC, batch 32) and odd ones,
forward (with and without a bias), stride-1 data gradient and weight gradient, served by its
Triton-built kernels in the conv op's ``depthwise`` module, verified by BOO, and right
against float64. Skipped without the library, Triton or a GPU of compute capability 9.0.
Run on the GPU machine: ``pytest -m gpu tests/gpu/test_kernel_library_depthwise.py``."""

from __future__ import annotations

import pytest
import torch

from boo_core import Target, get_launchable
from boo_ops_conv import ConvSignature

pytestmark = pytest.mark.gpu
ptx = pytest.importorskip("boo_kernels_hopper.ptx")
depthwise = pytest.importorskip("boo_kernels_hopper.depthwise")
hooks = pytest.importorskip("boo_kernels_hopper.hooks")

DEVICE = "cuda:0"
ROWS = [  # (channels, window, stride, size, mode, bias, batch)
    (96, 7, 1, 56, "fwd", True, 32),  # ConvNeXt-T's four stages
    (192, 7, 1, 28, "fwd", True, 32),
    (384, 7, 1, 14, "fwd", True, 32),
    (768, 7, 1, 7, "fwd", True, 32),
    (96, 7, 1, 56, "bwd", False, 32),
    (768, 7, 1, 7, "bwd", False, 32),
    (96, 7, 1, 56, "wrw", False, 32),
    (192, 7, 1, 28, "wrw", False, 32),
    (768, 7, 1, 7, "wrw", False, 32),
    (100, 3, 2, 15, "fwd", False, 3),  # MobileNet-like: strided 3x3, channels not a multiple of the tile
    (100, 3, 2, 15, "wrw", False, 3),
    (40, 5, 1, 9, "bwd", False, 2),
]


@pytest.fixture(autouse=True)
def hopper():
    reason = ptx.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)


def signature_of(c: int, window: int, stride: int, size: int, mode: str, bias: bool, n: int) -> ConvSignature:
    return ConvSignature((n, c, size, size), (c, 1, window, window), stride=stride, padding=window // 2, groups=c,
                         dtype=torch.bfloat16, shared_layout="NHWC", mode=mode, bias=bias)


def assert_right(signature, launchable) -> None:
    assert launchable.verified and not launchable.passed_over
    assert launchable.formulation == depthwise.FORMULATION
    inputs = signature.get_sample_args(device=DEVICE)
    reference = signature.reference(*[t.double() for t in inputs])
    for _ in range(2):
        out = launchable(*inputs)
        assert float((out.double() - reference).norm() / reference.norm()) < 1e-2


@pytest.mark.parametrize("row", ROWS, ids=lambda r: "c{}_{}x{}_s{}_at{}_{}{}_n{}".format(
    r[0], r[1], r[1], r[2], r[3], r[4], "_bias" * r[5], r[6]))
def test_a_depthwise_conv_is_served_by_the_library_kernel(private_cache, row):
    signature = signature_of(*row)
    launchable = get_launchable(signature, DEVICE)
    assert launchable.substitution is not None and launchable.substitution.name == "hopper_depthwise"
    assert launchable.launch == "direct"
    assert_right(signature, launchable)


@pytest.mark.parametrize("row", [ROWS[0], ROWS[6]], ids=["fwd", "wrw"])
def test_every_tuning_alternative_verifies(private_cache, row):
    signature = signature_of(*row)
    offered = hooks.candidates(signature, Target.parse("cuda:sm_90"))
    assert len(offered) > 2 and [s.name for s in offered][0] == "hopper_depthwise"
    for substitution in offered[1:]:
        launchable = get_launchable(signature, DEVICE, substitutions=substitution)
        assert launchable.substitution is not None and launchable.substitution.name == substitution.name
        assert_right(signature, launchable)
