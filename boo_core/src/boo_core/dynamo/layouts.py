"""Tensor layouts as the graph passes see them: (shape, strides, storage offset), and tensors
of storage offsets that show where a chain of views and copies takes each element
(:mod:`.reorders`, :mod:`.copy_chains`)."""

from __future__ import annotations

import torch
import torch.fx

from ..plugins.patterns import tensor_value

aten = torch.ops.aten

VIEWS = frozenset({aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.permute.default,
                  aten.transpose.int, aten.select.int, aten.slice.Tensor, aten.unsqueeze.default,
                  aten.squeeze.dim, aten.squeeze.default, aten.t.default, aten.alias.default})

Layout = tuple[tuple[int, ...], tuple[int, ...], int]
"""(shape, strides, storage offset) of a tensor."""


def node_value(argument: object) -> torch.Tensor | None:
    """:func:`tensor_value` of an argument that may not be a node (a scalar: None)."""
    return tensor_value(argument) if isinstance(argument, torch.fx.Node) else None


def static_layout(value: torch.Tensor) -> Layout | None:
    """The layout of a tensor of static shape; None for symbolic sizes (``int()`` of a size
    with a hint would answer for the traced example alone)."""
    try:
        numbers = (*value.shape, *value.stride(), value.storage_offset())
    except (TypeError, RuntimeError):
        return None
    if any(isinstance(n, torch.SymInt) for n in numbers):
        return None
    return tuple(map(int, value.shape)), tuple(map(int, value.stride())), int(value.storage_offset())


def dense_layout(value: torch.Tensor) -> Layout | None:
    """The layout of a dense, non-overlapping tensor of static shape; None otherwise."""
    layout = static_layout(value)
    if layout is None:
        return None
    shape, strides, offset = layout
    expected = 1  # dense: ordered by stride, each dimension steps over all the ones inside it
    for size, stride in sorted(((size, stride) for size, stride in zip(shape, strides) if size != 1),
                               key=lambda pair: pair[1]):
        if stride != expected:
            return None
        expected *= size
    return shape, strides, offset


def storage_offsets(layout: Layout) -> torch.Tensor:
    """A tensor of ``layout``'s shape holding each element's storage offset."""
    shape, strides, offset = layout
    span = offset + sum((size - 1) * stride for size, stride in zip(shape, strides)) + 1
    return counting(span).as_strided(shape, strides, offset)


_count = torch.empty(0, dtype=torch.int64)


def release_offsets() -> None:
    """Free the counting tensor :func:`storage_offsets` keeps between calls (a pass's memory only)."""
    global _count
    _count = torch.empty(0, dtype=torch.int64)


def counting(span: int) -> torch.Tensor:
    """0, 1, ..., span - 1 (int64; one tensor serves every call of a pass, made again only to grow)."""
    global _count
    if _count.numel() < span:
        _count = torch.arange(span, dtype=torch.int64)
    return _count[:span]


def affine_layout(offsets: torch.Tensor) -> tuple[tuple[int, ...], int] | None:
    """(strides, offset) with ``offsets[i] == offset + sum(i_d * strides[d])`` everywhere,
    all strides non-negative; None if there are none."""
    if offsets.numel() == 0:
        return None
    corner = [0] * offsets.dim()
    origin = int(offsets[tuple(corner)])
    strides = tuple(int(offsets[tuple(corner[:d] + [1] + corner[d + 1:])]) - origin if size > 1 else 0
                    for d, size in enumerate(offsets.shape))
    if any(s < 0 for s in strides) or origin < 0:
        return None
    expected = counting(origin + sum((n - 1) * s for n, s in zip(offsets.shape, strides)) + 1)
    if not torch.equal(expected.as_strided(offsets.shape, strides, origin), offsets):
        return None
    return strides, origin
