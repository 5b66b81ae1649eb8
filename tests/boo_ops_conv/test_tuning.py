"""The conv op's tuning space: what ``boo tune`` tries beyond the formulations."""

from __future__ import annotations

import torch

from boo_core import BooOpRegistry, Target
from boo_core.tune.space import resolve
from boo_ops_conv import ConvSignature
from boo_ops_conv.tuning import tuning_space

CPU, CUDA = Target.parse("cpu"), Target.parse("cuda:sm_80")


def labels(signature, target):
    formulations = BooOpRegistry.default().formulations(signature, target)
    return [c.label for c in resolve(formulations, tuning_space(signature, target), "conv")]


def test_cpu_weight_gradients_try_data_tiling_on_every_matmul_formulation():
    found = labels(ConvSignature((8, 64, 56, 56), (64, 64, 3, 3), padding=1, mode="wrw"), CPU)
    for name in ("default", "im2col", "im2col_split32", "im2col_split128"):
        assert name in found
        assert f"{name}+opt-data-tiling" in found
        assert f"{name}+opt-data-tiling+llvmcpu-enable-ukernels" in found
    assert "explicit_pad+opt-data-tiling" not in found  # its work is a convolution, not a matmul


def test_cpu_spaces_name_only_formulations_the_signature_has():
    # A strided data gradient has no im2col: its space is the flag sets of the plain export
    # and of phases (an im2col per phase of dX).
    strided = ConvSignature((2, 4, 8, 8), (4, 4, 3, 3), padding=1, stride=2, mode="bwd")
    assert labels(strided, CPU) == ["phases", "default", "default+opt-data-tiling",
                                    "default+opt-data-tiling+llvmcpu-enable-ukernels", "phases+opt-data-tiling",
                                    "phases+opt-data-tiling+llvmcpu-enable-ukernels"]


def test_cuda_spaces_tile_the_forward_im2col_matmul_only():
    forward = ConvSignature((32, 64, 56, 56), (64, 64, 3, 3), padding=1, dtype=torch.bfloat16, shared_layout="NHWC")
    assert any(label.startswith("im2col/wg") for label in labels(forward, CUDA))
    assert tuning_space(ConvSignature((32, 64, 56, 56), (64, 64, 3, 3), padding=1, dtype=torch.bfloat16,
                                      mode="wrw"), CUDA) == []
