"""``boo_conv``: a convolution on torch tensors through a BOO kernel."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from boo_core import ArgumentError, launchable_for
from boo_core.autograd import launch

from . import layouts
from .signature import ConvSignature


def boo_conv(
    x: torch.Tensor,
    w: torch.Tensor,
    b: torch.Tensor | None = None,
    *,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    groups: int = 1,
    shared_layout: str | None = None,
    input_layout: str | None = None,
    kernel_layout: str | None = None,
    output_layout: str | None = None,
) -> torch.Tensor:
    """Convolve ``x`` with ``w`` (and add ``b``) on the tensors' device with a BOO kernel.

    Tensors are passed in their layout's shape: with ``shared_layout="NHWC"``, ``x`` is
    (N, H, W, C), ``w`` is (K, Y, X, C/groups) and the result is (N, Ho, Wo, K). The
    default layout is NCHW, the same as ``torch.nn.functional.conv2d``. Differentiable:
    gradients come from PyTorch.
    """
    key = ("conv", x.shape, w.shape, b is None, x.dtype, w.dtype, None if b is None else b.dtype, _hashable(stride),
           _hashable(padding), _hashable(dilation), groups, shared_layout, input_layout, kernel_layout, output_layout)
    launchable = launchable_for(key, lambda: conv_signature_for(
        x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups, shared_layout=shared_layout,
        input_layout=input_layout, kernel_layout=kernel_layout, output_layout=output_layout), x.device)
    inputs = (x, w) if b is None else (x, w, b)
    return launch(launchable, *inputs)


def conv_signature_for(
    x: torch.Tensor,
    w: torch.Tensor,
    b: torch.Tensor | None = None,
    *,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    groups: int = 1,
    shared_layout: str | None = None,
    input_layout: str | None = None,
    kernel_layout: str | None = None,
    output_layout: str | None = None,
) -> ConvSignature:
    """The :class:`ConvSignature` that ``boo_conv`` runs for these arguments."""
    if x.dim() != w.dim():
        raise ArgumentError(f"boo_conv: x has {x.dim()} dims but w has {w.dim()}")
    rank = x.dim() - 2
    default = (shared_layout or layouts.LOGICAL.get(rank, "")).upper()
    input_layout = (input_layout or default).upper()
    kernel_layout = (kernel_layout or default).upper()
    for name, layout in (("input_layout", input_layout), ("kernel_layout", kernel_layout)):
        if not layouts.is_layout(layout, rank):
            raise ArgumentError(f"boo_conv: {name} {layout!r} does not fit a {x.dim()}-D tensor")
    if w.dtype != x.dtype or (b is not None and b.dtype != x.dtype):
        raise ArgumentError(f"boo_conv: x, w and b must share a dtype (got {x.dtype}, {w.dtype}"
                            f"{'' if b is None else ', ' + str(b.dtype)})")
    return ConvSignature(
        input_shape=layouts.logical_shape(tuple(x.shape), input_layout),
        kernel_shape=layouts.logical_shape(tuple(w.shape), kernel_layout),
        stride=stride, padding=padding, dilation=dilation, groups=groups, dtype=x.dtype,
        input_layout=input_layout, kernel_layout=kernel_layout, output_layout=output_layout or default,
        bias=b is not None)


def _hashable(value: int | Sequence[int]) -> int | tuple[int, ...]:
    return value if isinstance(value, int) else tuple(value)
