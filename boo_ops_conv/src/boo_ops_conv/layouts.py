"""Tensor layouts as MIOpen names them, and the permutations between logical and physical.

Lengths are always *logical* (N, C, [D,] H, W), as MIOpenDriver defines them; a layout
string names the physical order of those dimensions. The filter uses the same letters:
N is the output-channel count K, C the input channels per group, D/H/W the filter sizes,
so ``--fil_layout NHWC`` stores a filter as (K, Y, X, C/groups).
"""

from __future__ import annotations

import functools

import torch

#: Logical dimension order for each spatial rank.
LOGICAL = {1: "NCW", 2: "NCHW", 3: "NCDHW"}

#: Layouts MIOpenDriver accepts (``ValidateLayoutInputParameters``).
MIOPEN_LAYOUTS = ("NCHW", "NHWC", "CHWN", "NCDHW", "NDHWC")


def spatial_rank(layout: str) -> int:
    return len(layout) - 2


def is_layout(layout: str, rank: int) -> bool:
    """Whether ``layout`` is a permutation of the logical letters for ``rank``."""
    logical = LOGICAL.get(rank)
    return logical is not None and len(layout) == len(logical) and sorted(layout) == sorted(logical)


@functools.cache
def to_physical(layout: str) -> tuple[int, ...]:
    """Permutation taking a logical tensor to ``layout`` (``logical.permute(p)``)."""
    logical = LOGICAL[spatial_rank(layout)]
    return tuple(logical.index(letter) for letter in layout)


@functools.cache
def to_logical(layout: str) -> tuple[int, ...]:
    """Permutation taking a tensor stored in ``layout`` back to logical order."""
    return tuple(layout.index(letter) for letter in LOGICAL[spatial_rank(layout)])


def physical_shape(logical_shape: tuple[int, ...], layout: str) -> tuple[int, ...]:
    """The shape of a tensor of ``logical_shape`` stored in ``layout``."""
    return tuple(logical_shape[i] for i in to_physical(layout))


def logical_shape(physical: tuple[int, ...], layout: str) -> tuple[int, ...]:
    """The logical shape of a tensor whose stored shape is ``physical`` in ``layout``."""
    return tuple(physical[i] for i in to_logical(layout))


def is_identity(permutation: tuple[int, ...]) -> bool:
    return permutation == tuple(range(len(permutation)))


def permute(t: torch.Tensor, permutation: tuple[int, ...]) -> torch.Tensor:
    """``t.permute(permutation)``, or ``t`` itself when the permutation is the identity."""
    return t if is_identity(permutation) else t.permute(permutation)


def channels_last(rank: int) -> str:
    """The channels-last layout of a rank: NWC, NHWC, NDHWC (torch's channels_last formats)."""
    logical = LOGICAL[rank]
    return logical[0] + logical[2:] + logical[1]
