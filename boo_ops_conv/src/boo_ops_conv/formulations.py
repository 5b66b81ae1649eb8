"""The ways a convolution becomes a kernel, in the order BOO tries them.

Every formulation computes the same function as :meth:`ConvSignature.reference`, with the
same tensors; BOO takes the first that compiles (and, where it verifies kernels, passes),
and ``boo tune`` times them all.

* ``cropped`` (forward and weight gradient): the input padded explicitly and cut to the
  extent the windows read. IREE 3.13 rejects strided convolutions whose last window stops
  short of the end of the padded input (``inferred input/output operand #1 has shape's
  dimension #2 to be 7, but found 5``); without the unread tail the shapes agree. Offered
  first for that class, where ``default`` would fail to compile.
* ``default``: the export of the reference (``aten.convolution``).
* ``explicit_pad``: the padding as its own op, then an unpadded convolution.
* ``im2col``: the windows unfolded by strided slices (one per filter tap), then one
  matmul per group that accumulates in float32: forward ``W (K x C*T) @ cols (C*T x P)``,
  weight gradient ``dY (K x N*P) @ cols^T (N*P x C*T)``.
* ``logical_layout``: a channels-last convolution computed on NC[D]HW copies of its
  tensors, then stored back in its layout.

CUDA (measured on an H100, sm_80 PTX; benchmarks/gpu_conv_scan.py): IREE 3.13 computes
16-bit forward convolutions wrongly when the input is channels-last and padded, and forward
1x1 convolutions with an NCHW input wrongly in 16-bit types (with 256 output channels even
in float32). For those classes BOO offers first ``matmul_1x1`` (NCHW 1x1 unpadded
ungrouped: a batched matmul) and ``f32_compute`` (computed in float32, rounded once).
Verification (on by default on GPUs) refuses any formulation that comes out wrong, and the
next one serves.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import torch
import torch.nn.functional as F

from boo_core import Formulation, Target

from . import layouts
from .signature import ACTIVATIONS, ConvSignature

_HALF = (torch.bfloat16, torch.float16)


def conv_formulations(signature: ConvSignature, target: Target) -> tuple[Formulation, ...]:
    """The conv op's formulations for ``signature`` on ``target`` (module docstring)."""
    s = signature
    windowed = s.mode in ("fwd", "wrw") and not s.transposed
    first: list[Formulation] = []
    if windowed and _reads_less_than_padded(s):
        first.append(Formulation("cropped", computation=lambda *a: _unpadded(s, a, crop=True),
                                 description="input padded explicitly and cut to the extent the windows read"))
    if target.backend == "cuda" and s.mode == "fwd" and not s.transposed:
        if _is_unpadded_nchw_1x1(s):
            first.append(Formulation("matmul_1x1", computation=lambda *a: _one_by_one_matmul(s, *a),
                                     description="an unpadded NCHW 1x1 convolution as a batched matmul"))
        if s.dtype in _HALF and s.input_layout == layouts.channels_last(s.spatial_rank) and any(s.padding):
            first.append(Formulation("f32_compute", computation=lambda *a: _in_float32(s, *a),
                                     description="computed in float32, rounded once"))
    later: list[Formulation] = []
    if windowed:
        later.append(Formulation("explicit_pad", computation=lambda *a: _unpadded(s, a, crop=False),
                                 description="explicit padding, then an unpadded convolution"))
        later.append(Formulation("im2col", computation=lambda *a: _im2col(s, a),
                                 description="windows unfolded by strided slices, then float32-accumulated matmuls"))
    if not _all_logical(s) and s.mode != "bwd_bias":
        later.append(Formulation("logical_layout", computation=lambda *a: _in_logical_layout(s, a),
                                 description="computed on NC[D]HW copies of the tensors"))
    return (*first, Formulation("default"), *later)


# -- geometry ------------------------------------------------------------------------------------


def _read_extents(s: ConvSignature) -> tuple[int, ...]:
    """Per spatial axis, how much of the padded input the windows read."""
    axes = zip(s.output_spatial, s.stride, s.dilation, s.window)
    return tuple((o - 1) * st + d * (f - 1) + 1 for o, st, d, f in axes)


def _reads_less_than_padded(s: ConvSignature) -> bool:
    return any(extent < n + 2 * p for extent, n, p in zip(_read_extents(s), s.input_shape[2:], s.padding))


def _is_unpadded_nchw_1x1(s: ConvSignature) -> bool:
    return (s.input_layout == layouts.LOGICAL[s.spatial_rank] and all(w == 1 for w in s.window)
            and not any(s.padding) and s.groups == 1)


def _all_logical(s: ConvSignature) -> bool:
    logical = layouts.LOGICAL[s.spatial_rank]
    return s.input_layout == s.kernel_layout == s.output_layout == logical


def _logical_signature(s: ConvSignature, **changes: object) -> ConvSignature:
    """``s`` with every tensor in logical layout (and ``changes`` applied)."""
    return dataclasses.replace(s, input_layout=None, kernel_layout=None, output_layout=None,
                               shared_layout=layouts.LOGICAL[s.spatial_rank], **changes)


def _to_logical(s: ConvSignature, args: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
    """The kernel's inputs in logical layout (mode by mode: see ConvSignature)."""
    which = {"fwd": ("x", "w", "b"), "bwd": ("y", "w"), "wrw": ("y", "x"), "bwd_bias": ("y",)}[s.mode]
    layout = {"x": s.input_layout, "w": s.kernel_layout, "y": s.output_layout}
    return [layouts.permute(t, layouts.to_logical(layout[name])) if name in layout else t
            for t, name in zip(args, which)]


def _store(s: ConvSignature, result: torch.Tensor) -> torch.Tensor:
    """A logical result stored in the layout of the kernel's output."""
    layout = {"fwd": s.output_layout, "bwd": s.input_layout, "wrw": s.kernel_layout}.get(s.mode)
    return result if layout is None else layouts.permute(result, layouts.to_physical(layout))


def _pad(s: ConvSignature, x: torch.Tensor, crop: bool) -> torch.Tensor:
    """``x`` (logical) padded explicitly; with ``crop``, cut to the extent the windows read."""
    pads: list[int] = []
    for axis in reversed(range(s.spatial_rank)):  # F.pad lists the last dimension first
        n, p, extent = s.input_shape[2 + axis], s.padding[axis], _read_extents(s)[axis]
        pads += [p, max(0, extent - n - p) if crop else p]
    padded = F.pad(x, pads) if any(pads) else x
    if crop:
        padded = padded[(slice(None), slice(None), *(slice(0, extent) for extent in _read_extents(s)))]
    return padded


# -- formulations --------------------------------------------------------------------------------


def _unpadded(s: ConvSignature, args: tuple[torch.Tensor, ...], crop: bool) -> torch.Tensor:
    """``cropped`` and ``explicit_pad``: an unpadded convolution of the padded (and cut) input."""
    logical = _to_logical(s, args)
    position = 0 if s.mode == "fwd" else 1
    x = _pad(s, logical[position], crop)
    logical[position] = x
    inner = _logical_signature(s, input_shape=tuple(x.shape), padding=0)
    return _store(s, inner.reference(*logical))


def _in_logical_layout(s: ConvSignature, args: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """``logical_layout``: the same convolution on contiguous NC[D]HW copies."""
    logical = [t.contiguous() for t in _to_logical(s, args)]
    return _store(s, _logical_signature(s).reference(*logical))


def _columns(s: ConvSignature, x: torch.Tensor) -> torch.Tensor:
    """The unfolded windows of a logical input: (N, groups, C/groups * taps, output pixels)."""
    x = _pad(s, x, crop=True)
    n, c = x.shape[:2]
    taps = []
    for offsets in itertools.product(*(range(f) for f in s.window)):
        index = tuple(slice(o * d, o * d + (out - 1) * st + 1, st)
                      for o, d, out, st in zip(offsets, s.dilation, s.output_spatial, s.stride))
        taps.append(x[(slice(None), slice(None), *index)])
    columns = torch.stack(taps, dim=2)  # (N, C, taps, *output)
    return columns.reshape(n, s.groups, (c // s.groups) * len(taps), math.prod(s.output_spatial))


def _im2col(s: ConvSignature, args: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """``im2col``: forward and weight gradient as float32-accumulated matmuls."""
    logical = _to_logical(s, args)
    k, g = s.output_channels, s.groups
    n = s.input_shape[0]
    if s.mode == "fwd":
        x, w, *b = logical
        columns = _columns(s, x).float()
        weights = w.reshape(g, k // g, -1).float()
        y = torch.matmul(weights, columns).reshape(n, k, *s.output_spatial)  # (N, G, K/G, P) -> (N, K, *out)
        if b:
            y = y + b[0].float().reshape(k, *(1,) * s.spatial_rank)
        if s.activation:
            y = ACTIVATIONS[s.activation](y)
        return _store(s, y.to(s.dtype))
    dy, x = logical
    columns = _columns(s, x).float()  # (N, G, CT, P)
    pixels = columns.shape[-1]
    grads = dy.reshape(n, g, k // g, pixels).float()
    # dW[g] = sum over images and pixels of dY[g] (K/G x P) times columns[g]^T (P x CT)
    dw = torch.matmul(grads.permute(1, 2, 0, 3).reshape(g, k // g, n * pixels),
                      columns.permute(1, 0, 3, 2).reshape(g, n * pixels, -1))
    return _store(s, dw.reshape(s.kernel_shape).to(s.dtype))


def _in_float32(s: ConvSignature, *args: torch.Tensor) -> torch.Tensor:
    """``f32_compute``: the reference on float32 copies, rounded once."""
    return s.reference(*(a.float() for a in args)).to(s.dtype)


def _one_by_one_matmul(s: ConvSignature, x: torch.Tensor, w: torch.Tensor,
                       b: torch.Tensor | None = None) -> torch.Tensor:
    """``matmul_1x1``: an unpadded NCHW 1x1 convolution as a batched matmul."""
    sampled = x[(slice(None), slice(None), *(slice(None, None, st) for st in s.stride))]
    k = s.output_channels
    w2d = layouts.permute(w, layouts.to_logical(s.kernel_layout)).reshape(k, -1)
    y = torch.matmul(w2d, sampled.reshape(x.shape[0], x.shape[1], -1))  # (N, K, pixels)
    y = y.reshape(x.shape[0], k, *s.output_spatial)
    if b is not None:
        y = y + b.reshape(k, *(1,) * s.spatial_rank)
    if s.activation:
        y = ACTIVATIONS[s.activation](y)
    return layouts.permute(y, layouts.to_physical(s.output_layout))
