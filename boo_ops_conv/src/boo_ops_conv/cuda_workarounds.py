"""Convolutions IREE 3.13 compiles wrongly for CUDA, and the formulation BOO uses instead.

Measured on an H100 (sm_80 PTX; benchmarks/gpu_conv_scan.py): forward convolutions in
bfloat16 or float16 come out wrong (unwritten elements, or relative errors near 1) when the
input is channels-last and padded (any window > 1, any stride); forward 1x1 convolutions
with an NCHW input come out wrong in 16-bit types, and with 256 output channels even when
computed in float32. No compile flag fixes either (igemm off fixed the first at 60x the
time, and not at every size).

* Channels-last, padded, 16-bit: the kernel computes in float32 and rounds once at the
  end (every float32 convolution of that class was right): same signature, same tensors,
  a more precise result.
* NCHW 1x1, unpadded, ungrouped, any dtype: the kernel is a batched matmul
  (K x C times C x H*W for each image), which IREE compiles right.
"""

from __future__ import annotations

import dataclasses

import torch

from boo_core import Target
from boo_core.export import export_mlir

from . import layouts
from .signature import ACTIVATIONS, ConvSignature

_HALF = (torch.bfloat16, torch.float16)


def cuda_formulation(signature: ConvSignature) -> type[ConvSignature] | None:
    """The formulation BOO uses instead of the plain one on CUDA, or None (module docstring)."""
    if signature.mode != "fwd" or signature.transposed:
        return None
    rank = signature.spatial_rank
    if signature.input_layout == layouts.LOGICAL[rank] and all(w == 1 for w in signature.window) \
            and not any(signature.padding) and signature.groups == 1:
        return _OneByOneMatmul
    if signature.dtype in _HALF and signature.input_layout == layouts.channels_last(rank) and any(signature.padding):
        return _Float32Compute
    return None


@dataclasses.dataclass(frozen=True)
class _Float32Compute(ConvSignature):
    """The same kernel (name, tensors and all) computed in float32, rounded once at the end."""

    def reference(self, *args: torch.Tensor) -> torch.Tensor:
        return super().reference(*(a.float() for a in args)).to(self.dtype)


@dataclasses.dataclass(frozen=True)
class _OneByOneMatmul(ConvSignature):
    """An unpadded 1x1 convolution of an NCHW input as a batched matmul."""

    def reference(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
        sampled = x[(slice(None), slice(None), *(slice(None, None, s) for s in self.stride))]
        k = self.output_channels
        w2d = layouts.permute(w, layouts.to_logical(self.kernel_layout)).reshape(k, -1)
        y = torch.matmul(w2d, sampled.reshape(x.shape[0], x.shape[1], -1))  # (N, K, pixels)
        y = y.reshape(x.shape[0], k, *self.output_spatial)
        if b is not None:
            y = y + b.reshape(k, *(1,) * self.spatial_rank)
        if self.activation:
            y = ACTIVATIONS[self.activation](y)
        return layouts.permute(y, layouts.to_physical(self.output_layout))


def cuda_mlir(signature: ConvSignature, target: Target) -> str | None:
    """BOO's own MLIR for a convolution IREE would miscompile on ``target``, else None."""
    if target.backend != "cuda" or type(signature) is not ConvSignature:
        return None
    formulation = cuda_formulation(signature)
    if formulation is None:
        return None
    fields = {f.name: getattr(signature, f.name) for f in dataclasses.fields(signature)}
    return export_mlir(formulation(**fields))
