"""The ways a convolution becomes a kernel, in the order BOO tries them.

Every formulation computes the same function as :meth:`ConvSignature.reference`, with the
same tensors; BOO takes the first that compiles (and, where it verifies kernels, passes),
and ``boo tune`` times them all.

CUDA (measured on an H100, sm_80 PTX; benchmarks/gpu_conv_scan.py): IREE 3.13 computes
forward convolutions in bfloat16 or float16 wrongly when the input is channels-last and
padded, and forward 1x1 convolutions with an NCHW input wrongly in 16-bit types (with 256
output channels even in float32). No compile flag fixes either. So, first:

* ``matmul_1x1`` (NCHW 1x1, unpadded, ungrouped, any dtype): a batched matmul, K x C times
  C x H*W per image, which IREE compiles right;
* ``f32_compute`` (16-bit, channels-last, padded): the same convolution computed in
  float32 and rounded once (every float32 convolution of that class was right).

and the export of the reference (``default``) after them.
"""

from __future__ import annotations

import torch

from boo_core import Formulation, Target

from . import layouts
from .signature import ACTIVATIONS, ConvSignature

_HALF = (torch.bfloat16, torch.float16)


def conv_formulations(signature: ConvSignature, target: Target) -> tuple[Formulation, ...]:
    """The conv op's formulations for ``signature`` on ``target`` (module docstring)."""
    found = []
    if target.backend == "cuda" and signature.mode == "fwd" and not signature.transposed:
        if _is_unpadded_nchw_1x1(signature):
            found.append(Formulation("matmul_1x1", computation=lambda *a: _one_by_one_matmul(signature, *a),
                                     description="an unpadded NCHW 1x1 convolution as a batched matmul"))
        if signature.dtype in _HALF and signature.input_layout == layouts.channels_last(signature.spatial_rank) \
                and any(signature.padding):
            found.append(Formulation("f32_compute", computation=lambda *a: _in_float32(signature, *a),
                                     description="computed in float32, rounded once"))
    found.append(Formulation("default"))
    return tuple(found)


def _is_unpadded_nchw_1x1(signature: ConvSignature) -> bool:
    return (signature.input_layout == layouts.LOGICAL[signature.spatial_rank] and all(w == 1 for w in signature.window)
            and not any(signature.padding) and signature.groups == 1)


def _in_float32(signature: ConvSignature, *args: torch.Tensor) -> torch.Tensor:
    return signature.reference(*(a.float() for a in args)).to(signature.dtype)


def _one_by_one_matmul(signature: ConvSignature, x: torch.Tensor, w: torch.Tensor,
                       b: torch.Tensor | None = None) -> torch.Tensor:
    sampled = x[(slice(None), slice(None), *(slice(None, None, s) for s in signature.stride))]
    k = signature.output_channels
    w2d = layouts.permute(w, layouts.to_logical(signature.kernel_layout)).reshape(k, -1)
    y = torch.matmul(w2d, sampled.reshape(x.shape[0], x.shape[1], -1))  # (N, K, pixels)
    y = y.reshape(x.shape[0], k, *signature.output_spatial)
    if b is not None:
        y = y + b.reshape(k, *(1,) * signature.spatial_rank)
    if signature.activation:
        y = ACTIVATIONS[signature.activation](y)
    return layouts.permute(y, layouts.to_physical(signature.output_layout))
