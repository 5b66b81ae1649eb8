"""Batch-norm kernels (CPU) against their float64 reference, outputs poisoned first: every
mode, both layouts, spatial and per-activation, three dtypes, 1-D to 3-D."""

from __future__ import annotations

import pytest
import torch

from boo_core.testing import assert_numerics
from boo_ops_batchnorm import BatchNormSignature as S

f32, f16, bf16 = torch.float32, torch.float16, torch.bfloat16

KERNELS = [
    S((4, 6, 5, 3), save=True, running=True),  # training forward, everything out
    S((4, 6, 5, 3), channels_last=True, save=True, running=True, dtype=bf16),
    S((4, 6, 5, 3), channels_last=True, save=True, running=True, dtype=bf16, running_dtype=bf16),  # bf16 buffers
    S((3, 5, 4, 2, 3), channels_last=True, dtype=f16),  # 3-D, y only
    S((8, 7), save=True, running=True),  # BatchNorm1d on (N, C)
    S((4, 6, 9), spatial=False, save=True, running=True),  # per-activation
    S((4, 6, 5, 3), channels_last=True, save=True, running=True, dtype=bf16, running_dtype=bf16, residual=True,
      activation="relu"),  # a residual block's batch norm, sum and ReLU
    S((4, 6, 9), spatial=False, residual=True),
    S((4, 6, 5, 3), mode="infer", running=True, dtype=bf16, activation="relu"),
    S((4, 6, 5, 3), mode="infer", running=True, residual=True),
    S((4, 6, 5, 3), mode="infer", running=True, dtype=bf16, running_dtype=bf16),
    S((2, 4, 3, 5, 6), mode="infer", running=True),  # channels-first 3-D: whole planes to a CPU workgroup
    S((4, 6, 20), mode="infer", running=True, dtype=f16),  # and 1-D
    S((4, 6, 5, 3), mode="infer", channels_last=True, running=True),  # on the CPU, each channel's scale once
    S((4, 6, 5, 3), mode="infer", channels_last=True, running=True, dtype=bf16, running_dtype=bf16, residual=True,
      activation="relu"),
    S((3, 5, 4, 2, 3), mode="infer", channels_last=True, running=True, dtype=f16),
    S((4, 6, 5, 3), mode="infer", spatial=False),  # per-activation, batch statistics
    S((4, 6, 5, 3), mode="bwd", save=True),
    S((4, 6, 5, 3), mode="bwd", channels_last=True, save=True, dtype=bf16),
    S((4, 6, 5, 3), mode="bwd", channels_last=True, save=True, dtype=bf16, activation="relu"),  # ReLU gradient first
    S((4, 6, 5, 3), mode="bwd", save=True, activation="relu"),
    S((4, 6, 5, 3), mode="bwd", channels_last=True, save=True, dtype=bf16, residual=True, activation="relu"),  # + dy2
    S((4, 6, 5, 3), mode="bwd", save=True, residual=True),
    S((5, 4, 3), mode="bwd", spatial=False),  # statistics recomputed from x
]


@pytest.mark.parametrize("signature", KERNELS, ids=lambda s: s.func_name)
def test_kernel_matches_its_reference_with_poisoned_outputs(signature):
    assert_numerics(signature)


#: Statistics of two samples (per activation, a batch of 2): where the two nearly agree, the
#: deviation is tiny against |x| and float32 statistics lose digits in every implementation;
#: so does a backward's dx.
FEW_SAMPLES = [S((2, 34, 5, 12, 4), spatial=False, channels_last=True, mode="bwd"),
               S((2, 34, 12, 4), spatial=False, save=True),
               # from the saved statistics: dx's n dy - sum(dy) - x̂ sum(dy x̂) nearly cancels (drawn by
               # benchmarks/random_commands.py --bnorm 150 --seed 29; PyTorch's float32 failed 36 seeds of 200)
               S((2, 11, 2, 8), spatial=False, channels_last=True, save=True, mode="bwd")]


@pytest.mark.parametrize("signature", FEW_SAMPLES, ids=lambda s: s.func_name)
def test_the_tolerance_admits_float32_statistics_of_few_samples_and_nothing_more(signature):
    """PyTorch's own float32 computation of these passes (before the tolerance allowed a
    float32 kernel a few times that computation's own error, its dx failed, 0.003 off where
    the largest element is 370, and so did BOO's kernel, as much off); the same result with
    one element of each output moved by a thousandth of the output's largest value fails."""
    from boo_core.verify.numerics import check_outputs

    args = signature.get_sample_args(seed=0)
    float32 = signature.reference(*args)
    float32 = (float32,) if isinstance(float32, torch.Tensor) else float32
    assert all(c.passed for c in check_outputs(signature, args, float32)), check_outputs(signature, args, float32)
    for index, output in enumerate(float32):
        if output.numel() == 1 or not output.dtype.is_floating_point:
            continue
        moved = [o.clone() for o in float32]
        flat = moved[index].view(-1)
        flat[flat.numel() // 2] += 1e-3 * output.abs().max()
        comparison = check_outputs(signature, args, moved)[index]
        assert not comparison.passed, f"{comparison} (moved by {1e-3 * output.abs().max().item():.3g})"
