"""How CBAInfer's kernel is built: the reference's export, and on CUDA, for an unpadded,
ungrouped 1x1 convolution, the conv stage as a batched matmul (``matmul_1x1``), first: IREE's
own kernel for such NCHW 1x1 convolutions came out wrong on an H200 (fp16, 32 output
channels, per-activation batch norm and logistic: every element off; docs/gpu.md has the
conv op's class). Verification refuses any formulation that comes out wrong, and the next
one serves. On CUDA an NHWC padded convolution also has the conv op's ``channels_last``
(formulations.py: one executable, the padding fused into the convolution), last: the Hopper
kernel library substitutes into it. On the CPU, a conv stage that the conv op builds
through ``im2col`` first (ungrouped, channels-last, strided or on short output rows:
``im2col_first_on_the_cpu``)
is built that way here too: IREE's own convolution took 9-10x its time there, and CBAInfer's
reference export had it."""

from __future__ import annotations

import functools

import torch

from boo_core import Formulation, Target

from . import split_forward
from .cba_signature import ConvBatchNormActivationSignature
from .formulations import (
    channels_last_formulation,
    im2col_first_on_the_cpu,
    im2col_flags,
    im2col_forward,
    split_k_formulation,
)
from .signature import ConvSignature


def cba_formulations(signature: ConvBatchNormActivationSignature, target: Target) -> tuple[Formulation, ...]:
    """The CBAInfer op's formulations for ``signature`` on ``target`` (module docstring)."""
    s = signature
    split = split_k_of(s) if target.backend == "cuda" else None
    if split is not None:
        return (Formulation("default"), *([channels_last_formulation()] if any(s.padding) else []), split)
    if target.backend == "cuda" and is_plain_1x1(s):
        return (Formulation("matmul_1x1", computation=lambda *a: s.compute(a, one_by_one_matmul),
                            description="the unpadded 1x1 convolution as a batched matmul"),
                Formulation("default"))
    if target.backend == "cuda" and s.has_conv and s.layout == "NHWC" and any(s.padding):
        return (Formulation("default"), channels_last_formulation())
    if s.has_conv and im2col_first_on_the_cpu(conv_stage(s, s.layout), target):
        stage = conv_stage(s)
        conv = functools.partial(im2col_forward, stage, in_place=True)  # the CPU's module
        return (Formulation("im2col", computation=lambda *a: s.compute(a, conv), flags=im2col_flags(stage, target),
                            description="the conv stage as the conv op's im2col (unfolded windows times the filter)"),
                Formulation("default"))
    return (Formulation("default"),)


def split_k_of(s: ConvBatchNormActivationSignature) -> Formulation | None:
    """The conv op's ``split_k`` for ``s``, its epilogue CBAInfer's (bias, batch norm,
    residual, activation), where the conv op splits ``s``'s channels-last conv stage and the
    epilogue has ``s``'s batch norm (per channel) and activation."""
    if not s.has_conv or s.layout != "NHWC" or (s.has_norm and s.bn_mode != "spatial"):
        return None
    activation = None
    if s.has_activation and s.activation != "passthru":
        activation = split_forward.ACTIVATIONS.get(s.activation)
        if activation is None:
            return None
    conv = conv_stage(s, "NHWC")
    if split_forward.parts(conv) is None:
        return None
    epilogue = split_forward.Epilogue(bias=bool(s.has_bias), eps=float(s.eps) if s.has_norm else None,
                                      residual=bool(s.residual), activation=activation, alpha=float(s.alpha),
                                      beta=float(s.beta))
    return split_k_formulation(conv, epilogue, [spec.name for spec in s.input_specs()], s.func_name)


def conv_stage(s: ConvBatchNormActivationSignature, layout: str = "NCHW") -> ConvSignature:
    """The conv op's signature of ``s``'s convolution with its tensors in ``layout`` (by
    default logical, what :meth:`~.ConvBatchNormActivationSignature.compute` hands over)."""
    return ConvSignature((s.n, s.c, s.h, s.w), (s.k, s.c // s.groups, s.fil_h, s.fil_w),
                         stride=(s.stride_h, s.stride_w), padding=s.padding, dilation=(s.dilation_h, s.dilation_w),
                         groups=s.groups, dtype=s.dtype, bias=s.has_bias, shared_layout=layout)


def is_plain_1x1(s: ConvBatchNormActivationSignature) -> bool:
    """An NCHW 1x1 convolution with no padding, stride or dilation, one group."""
    return s.has_conv and s.layout == "NCHW" and \
        (s.fil_h, s.fil_w, s.stride_h, s.stride_w, s.dilation_h, s.dilation_w, s.groups) == \
        (1, 1, 1, 1, 1, 1, 1) and s.padding == (0, 0)


def one_by_one_matmul(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """An unpadded NCHW 1x1 convolution, ``(K, C) @ (N, C, H*W)``."""
    n, c, h, width = x.shape
    y = torch.matmul(w.reshape(w.shape[0], c), x.reshape(n, c, h * width)).reshape(n, -1, h, width)
    return y if b is None else y + b.reshape(-1, 1, 1)
