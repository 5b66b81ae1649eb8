"""Fusion patterns for the torch.compile backends: convolutions (with a following activation)
and their gradients (which the backends offer only under BOO_USE_BACKWARD_KERNELS=1).

A grouped convolution on a CUDA device is left to PyTorch (cuDNN), with the reason in the
offload summary: BOO has no kernel near cuDNN's for grouped convolutions
(:data:`GROUPED_ON_CUDA`), and its depthwise kernels lose more in the forward and the weight
gradient than they win in the data gradient (:data:`DEPTHWISE_ON_CUDA`), so offloading them
would make a network slower, not faster.
``boo_conv`` and the driver still run them on BOO's kernels, and so does torch.compile where
:data:`OFFLOAD_GROUPED_ON_CUDA` is set (``benchmarks/gpu.py --traced`` sets it to list them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch
import torch.fx

from boo_core.plugins.patterns import BoundLaunch, Decline, FusionMatch, FusionPattern, only_user

from .eager import boo_conv, boo_conv_backward, bound_conv, bound_conv_backward, conv_signature_for
from .signature import ACTIVATIONS, ConvSignature

aten = torch.ops.aten

_ACTIVATION_OPS = {aten.relu.default: "relu", aten.gelu.default: "gelu", aten.silu.default: "silu",
                   aten.sigmoid.default: "sigmoid", aten.tanh.default: "tanh"}


#: Why torch.compile leaves a grouped convolution on a CUDA device to PyTorch.
GROUPED_ON_CUDA = ("a grouped convolution on CUDA: BOO's kernels for these (IREE's own) took 15x the time of "
                   "cuDNN's in geometric mean, up to 138x, on ResNeXt-50's and ConvNeXt-T's layers (H100, docs/gpu.md)")


#: Why torch.compile leaves a depthwise convolution (a channel a group) on a CUDA device to PyTorch.
DEPTHWISE_ON_CUDA = ("a depthwise convolution on CUDA: BOO's kernels for these (the Hopper kernel library's) took "
                     "1.2-1.3x cuDNN's time forward and 2.2-3.5x for the weight gradient, 0.75-0.87x for the data "
                     "gradient, on ConvNeXt-T's layers: about 1.1 ms more per training step (H200, docs/gpu.md)")


#: Whether torch.compile offloads grouped convolutions on CUDA all the same.
OFFLOAD_GROUPED_ON_CUDA = False


def declined_on_cuda(x: object, groups: int) -> Decline | None:
    """The decline of a grouped convolution whose input ``x`` (a graph node) is on a CUDA
    device (module docstring); None for any other."""
    if OFFLOAD_GROUPED_ON_CUDA:
        return None
    value = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    if groups > 1 and isinstance(value, torch.Tensor) and value.device.type == "cuda":
        return Decline(DEPTHWISE_ON_CUDA if value.dim() > 1 and value.shape[1] == groups else GROUPED_ON_CUDA)
    return None


def _options(node: torch.fx.Node) -> dict[str, Any] | None:
    """boo_conv's options from aten.convolution's (or convolution_backward's) int arguments."""
    stride, padding, dilation, transposed, output_padding, groups = node.args[3:9] if \
        node.target is aten.convolution.default else node.args[4:10]
    try:
        return dict(stride=[int(v) for v in stride], padding=[int(v) for v in padding],
                    dilation=[int(v) for v in dilation], transposed=bool(transposed),
                    output_padding=[int(v) for v in output_padding], groups=int(groups))
    except TypeError:  # symbolic values: leave it to PyTorch
        return None


def _activation(node: torch.fx.Node, conv: torch.fx.Node) -> str | None:
    name = _ACTIVATION_OPS.get(node.target) if node.op == "call_function" else None
    if name is None or node.args[:1] != (conv,) or len(node.args) > 1:
        return None
    if name == "gelu" and node.kwargs.get("approximate", "none") != "none":
        return None
    return name


class ConvForward(FusionPattern):
    """``aten.convolution``, and the activation after it when the conv's only user is one."""

    name = "conv.forward"
    anchors = (aten.convolution.default,)

    def match(self, node: torch.fx.Node) -> FusionMatch | Decline | None:
        options = _options(node)
        if options is None:
            return None
        x, w, b = node.args[:3]
        if (declined := declined_on_cuda(x, options["groups"])) is not None:
            return declined
        nodes = [node]
        user = only_user(node)
        activation = _activation(user, node) if user is not None else None
        if activation:
            nodes.append(user)
        return FusionMatch(tuple(nodes), (x, w) if b is None else (x, w, b), {**options, "activation": activation})

    def signatures(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> list[ConvSignature]:
        return [conv_signature_for(*inputs, **spec)]

    def launch(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> torch.Tensor:
        return boo_conv(*inputs, **spec)

    def bind(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> BoundLaunch | None:
        return bound_conv(*inputs, **spec)

    def reference(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> torch.Tensor:
        x, w, *b = inputs
        y = aten.convolution(x, w, b[0] if b else None, spec["stride"], spec["padding"], spec["dilation"],
                             spec["transposed"], spec["output_padding"], spec["groups"])
        return ACTIVATIONS[spec["activation"]](y) if spec["activation"] else y


def _conv_options(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A backward match's spec without its gradient mask: the forward conv's options."""
    return {k: v for k, v in spec.items() if k != "mask"}


class ConvBackward(FusionPattern):
    """``aten.convolution_backward``: the data, weight and bias gradients BOO kernels compute."""

    name = "conv.backward"
    anchors = (aten.convolution_backward.default,)

    def match(self, node: torch.fx.Node) -> FusionMatch | Decline | None:
        options = _options(node)
        if options is None:
            return None
        dy, x, w = node.args[:3]
        if (declined := declined_on_cuda(x, options["groups"])) is not None:
            return declined
        return FusionMatch((node,), (dy, x, w), {**options, "mask": [bool(m) for m in node.args[10]]})

    def signatures(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> list[ConvSignature]:
        forward = conv_signature_for(inputs[1], inputs[2], **_conv_options(spec))
        modes = [mode for mode, wanted in zip(("bwd", "wrw", "bwd_bias"), spec["mask"]) if wanted]
        return [replace(forward, mode=mode) for mode in modes]

    def launch(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> tuple:
        return boo_conv_backward(*inputs, spec["mask"], **_conv_options(spec))

    def bind(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> BoundLaunch | None:
        return bound_conv_backward(*inputs, spec["mask"], **_conv_options(spec))

    def reference(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> tuple:
        dy, x, w = inputs
        bias_sizes = [w.shape[1] * spec["groups"] if spec["transposed"] else w.shape[0]]
        return aten.convolution_backward(dy, x, w, bias_sizes, spec["stride"], spec["padding"], spec["dilation"],
                                         spec["transposed"], spec["output_padding"], spec["groups"], spec["mask"])


PATTERNS: tuple[FusionPattern, ...] = (ConvForward(), ConvBackward())
