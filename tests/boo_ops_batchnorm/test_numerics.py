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
    S((4, 6, 5, 3), mode="infer", channels_last=True, running=True),
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
