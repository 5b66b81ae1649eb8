"""An independent float64 reference for every conv mode: torch.nn.functional plus autograd.

Written without the plugin's code: layouts are applied with explicit permutations, and the
gradients come from differentiating F.conv*/F.conv_transpose*, not aten.convolution_backward.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from boo_ops_conv import ConvSignature

LOGICAL = {1: "NCW", 2: "NCHW", 3: "NCDHW"}
FORWARD = {(1, False): F.conv1d, (2, False): F.conv2d, (3, False): F.conv3d,
           (1, True): F.conv_transpose1d, (2, True): F.conv_transpose2d, (3, True): F.conv_transpose3d}
ACTIVATION = {None: lambda t: t, "relu": torch.relu, "gelu": F.gelu, "silu": F.silu, "sigmoid": torch.sigmoid,
              "tanh": torch.tanh}


def to_logical(t: torch.Tensor, layout: str) -> torch.Tensor:
    return t.permute([layout.index(letter) for letter in LOGICAL[t.dim() - 2]])


def to_layout(t: torch.Tensor, layout: str) -> torch.Tensor:
    return t.permute([LOGICAL[t.dim() - 2].index(letter) for letter in layout])


def convolve(s: ConvSignature, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    fn = FORWARD[(s.spatial_rank, s.transposed)]
    if s.transposed:
        return fn(x, w, b, s.stride, s.padding, s.output_padding, s.groups, s.dilation)
    return fn(x, w, b, s.stride, s.padding, s.dilation, s.groups)


def expected(s: ConvSignature, args: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """The signature's output for ``args`` (laid out as its input specs say), in float64."""
    f64 = [a.double() for a in args]
    if s.mode == "fwd":
        x, w = to_logical(f64[0], s.input_layout), to_logical(f64[1], s.kernel_layout)
        y = ACTIVATION[s.activation](convolve(s, x, w, f64[2] if s.bias else None))
        return to_layout(y, s.output_layout)
    dy = to_logical(f64[0], s.output_layout)
    x = torch.randn(s.input_shape, dtype=torch.float64)
    w = torch.randn(s.kernel_shape, dtype=torch.float64)
    if s.mode == "bwd":
        w = to_logical(f64[1], s.kernel_layout)
    elif s.mode == "wrw":
        x = to_logical(f64[1], s.input_layout)
    x.requires_grad_(s.mode == "bwd")
    w.requires_grad_(s.mode == "wrw")
    b = torch.zeros(s.output_channels, dtype=torch.float64, requires_grad=s.mode == "bwd_bias")
    convolve(s, x, w, b).backward(dy)
    if s.mode == "bwd":
        return to_layout(x.grad, s.input_layout)
    if s.mode == "wrw":
        return to_layout(w.grad, s.kernel_layout)
    return b.grad
