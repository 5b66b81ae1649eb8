"""Functions the library's Triton kernels share (imported only where Triton is installed):
the epilogue's activation, and the order output tiles are visited in."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def activation(x, ACT: tl.constexpr):
    """``ACT`` applied to float32 ``x``: relu, gelu, silu, sigmoid, tanh, or "" for none."""
    if ACT == "relu":
        x = tl.maximum(x, 0.0)
    elif ACT == "gelu":  # the exact (erf) form, as torch's default
        x = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
    elif ACT == "silu":
        x = x * tl.sigmoid(x)
    elif ACT == "sigmoid":
        x = tl.sigmoid(x)
    elif ACT == "tanh":  # tanh(x) = 2 sigmoid(2x) - 1
        x = 2.0 * tl.sigmoid(2.0 * x) - 1.0
    return x


@triton.jit
def grouped_tile(tile, TILES_M: tl.constexpr, TILES_N: tl.constexpr, GROUP: tl.constexpr):
    """The (row, column) of output tile ``tile`` of a TILES_M x TILES_N grid visited in
    groups of GROUP rows of tiles (a group's programs share their rows' reads in L2)."""
    per_group: tl.constexpr = GROUP * TILES_N
    first_m = (tile // per_group) * GROUP
    rows = min(TILES_M - first_m, GROUP)
    return first_m + (tile % per_group) % rows, (tile % per_group) // rows
