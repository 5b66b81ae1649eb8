"""The inference fusion pattern of conv + batch norm (+ residual) (+ activation): one CBAInfer kernel.

In an inference graph, ``aten.convolution`` (2-D, not transposed) whose only user is an
inference batch norm (``_native_batch_norm_legit_no_training``, only its normalized output
read), optionally followed by the add of a tensor of its shape (a skip connection: BOO's
``--residual``) and by a ReLU, sigmoid or tanh, is what MIOpen's ``CBAInfer`` computes:
the batch norm runs in the convolution's epilogue from the running statistics, so the model
pays one launch and no per-step arithmetic on its weights. The batch norm is an aten op, so
this pattern needs nothing of the batch-norm plugin. It comes before ``conv.forward`` (ops
offer patterns in name order), and graph rewrites leave alone the nodes it takes (the
batch-norm plugin's fold then serves only what this pattern declines: 1-D and 3-D
convolutions, statistics in another dtype than the data's).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F

from boo_core import get_launchable
from boo_core.plugins.patterns import BoundLaunch, Decline, FusionMatch, FusionPattern, only_user

from . import layouts
from .cba_signature import DTYPES, ConvBatchNormActivationSignature
from .fusion import _options, declined_on_cuda

aten = torch.ops.aten

#: torch's activation op -> (MIOpen's activation mode, its alpha, beta): tanh is ``beta * tanh(alpha * x)``.
_ACTIVATIONS = {aten.relu.default: ("relu", 1.0, 0.0), aten.sigmoid.default: ("logistic", 1.0, 0.0),
                aten.tanh.default: ("tanh", 1.0, 1.0)}
_TORCH_ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": torch.relu, "logistic": torch.sigmoid, "tanh": torch.tanh, "passthru": lambda y: y}


def _layout(x: torch.Tensor, w: torch.Tensor) -> str | None:
    """NCHW or NHWC where x and the filter are both dense in that layout (a 1x1 filter is
    both), else None."""
    for layout in ("NCHW", "NHWC"):
        order = layouts.to_physical(layout)
        if layouts.permute(x, order).is_contiguous() and layouts.permute(w, order).is_contiguous():
            return layout
    return None


class ConvBatchNormInference(FusionPattern):
    """conv (+ bias) -> inference batch norm (-> + residual) (-> relu | sigmoid | tanh): one
    CBAInfer kernel (the residual add, a ResNet block's skip connection, is BOO's
    ``--residual``)."""

    name = "cbainfer.conv_batch_norm"
    anchors = (aten.convolution.default,)

    def match(self, node: torch.fx.Node) -> FusionMatch | Decline | None:
        chain = _conv_batch_norm(node)
        if chain is None:
            return None
        nodes, tensors, spec = chain
        if (declined := declined_on_cuda(tensors[0], spec["groups"])) is not None:
            return declined
        user = only_user(nodes[-1])
        residual = _residual(user, nodes[-1]) if user is not None else None
        if residual is not None:
            nodes.append(user)
            tensors.append(residual)
            user = only_user(user)
        activation, alpha, beta = "passthru", 1.0, 0.0
        if user is not None and user.op == "call_function" and user.target in _ACTIVATIONS \
                and user.args[:1] == (nodes[-1],) and len(user.args) == 1 and not user.kwargs:
            activation, alpha, beta = _ACTIVATIONS[user.target]
            nodes.append(user)
        spec.update(activation=activation, alpha=alpha, beta=beta, residual=residual is not None)
        return FusionMatch(tuple(nodes), tuple(tensors), spec)

    def signatures(self, spec: Mapping[str, Any],
                   inputs: Sequence[torch.Tensor]) -> list[ConvBatchNormActivationSignature]:
        return [cba_signature_for(spec, inputs)]

    def launch(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> torch.Tensor:
        return _GeneralCall(spec, inputs)(*inputs)

    def bind(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> BoundLaunch | None:
        run = _GeneralCall(spec, inputs)
        views = [run.stored if stored else None for stored in run.in_layout]
        direct = run.launchable.bind(inputs, views, (run.logical,))
        return run if direct is None else direct.or_else(run)

    def reference(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> torch.Tensor:
        x, w, *rest = inputs
        b = rest.pop(0) if spec["bias"] else None
        gamma, beta, mean, var = rest[:4]
        y = aten.convolution(x, w, b, spec["stride"], spec["padding"], spec["dilation"], False,
                             spec["output_padding"], spec["groups"])
        y = F.batch_norm(y, mean, var, gamma, beta, False, 0.0, spec["eps"])
        if spec.get("residual"):
            y = y + rest[4]
        return _TORCH_ACTIVATIONS[spec["activation"]](y)


Chain = tuple[list[torch.fx.Node], list[torch.fx.Node], dict[str, Any]]
"""A conv -> batch norm -> normalized output chain: its nodes, its tensors and its spec so far."""


def _conv_batch_norm(node: torch.fx.Node) -> Chain | None:
    """The chain from ``node`` (an ``aten.convolution``) to its inference batch norm's
    normalized output, when it is one CBAInfer computes, else None."""
    if node.target is not aten.convolution.default:
        return None
    options = _options(node)
    if options is None or options["transposed"]:
        return None
    x, w, b = node.args[:3]
    norm = only_user(node)
    if norm is None or norm.target is not aten._native_batch_norm_legit_no_training.default \
            or norm.args[0] is not node:
        return None
    _, gamma, beta, mean, var, _, eps = norm.args[:7]
    normalized = only_user(norm)
    if gamma is None or beta is None or normalized is None or normalized.target is not operator.getitem \
            or normalized.args[1] != 0:
        return None
    tensors = [t for t in (x, w, b, gamma, beta, mean, var) if t is not None]
    values = [t.meta.get("val") for t in tensors]
    if not all(isinstance(v, torch.Tensor) for v in values) or values[0].dim() != 4:
        return None
    if len({v.dtype for v in values}) != 1 or values[0].dtype not in DTYPES:
        return None  # statistics in another dtype than the data's: not a CBAInfer signature
    layout = _layout(values[0], values[1])
    if layout is None:
        return None
    return [node, norm, normalized], tensors, {**options, "bias": b is not None, "eps": float(eps), "layout": layout}


def _residual(add: torch.fx.Node, normalized: torch.fx.Node) -> torch.fx.Node | None:
    """The other operand of ``add`` when it is ``normalized + r`` (either order) with ``r`` of
    the same shape and dtype, and this chain is the one to take it: where ``r`` is itself
    a later conv -> batch norm chain's output (a ResNet block's downsampled identity), that
    chain takes the add, so exactly one of the two does."""
    if add.op != "call_function" or add.target is not aten.add.Tensor or len(add.args) != 2 \
            or add.kwargs.get("alpha", 1) != 1 or normalized not in add.args or add.args[0] is add.args[1]:
        return None
    other = add.args[1] if add.args[0] is normalized else add.args[0]
    mine, theirs = normalized.meta.get("val"), other.meta.get("val") if isinstance(other, torch.fx.Node) else None
    if not isinstance(theirs, torch.Tensor) or theirs.shape != mine.shape or theirs.dtype != mine.dtype:
        return None
    sibling = other.args[0].args[0] if other.target is operator.getitem and isinstance(other.args[0], torch.fx.Node) \
        and other.args[0].args else None
    if isinstance(sibling, torch.fx.Node) and _conv_batch_norm(sibling) is not None and other > normalized:
        return None
    return other


def cba_signature_for(spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> ConvBatchNormActivationSignature:
    """The CBAInfer signature of a match's spec and (fake or real) inputs."""
    x, w = inputs[:2]
    n, c, h, width = x.shape
    k, _, r, s = w.shape
    activation = spec["activation"]
    # MIOpen has no conv + bias + batch norm without an activation: passthru is none
    fusion = "cbna" if spec["bias"] else ("cna" if activation != "passthru" else "cn")
    return ConvBatchNormActivationSignature(
        n=n, c=c, h=h, w=width, k=k, fil_h=r, fil_w=s, stride_h=spec["stride"][0], stride_w=spec["stride"][1],
        pad_h=spec["padding"][0], pad_w=spec["padding"][1], dilation_h=spec["dilation"][0],
        dilation_w=spec["dilation"][1], groups=spec["groups"], fusion=fusion, bn_mode="spatial",
        activation=activation, alpha=spec["alpha"], beta=spec["beta"], eps=spec["eps"], dtype=x.dtype,
        layout=spec["layout"], residual=bool(spec.get("residual")))


class _GeneralCall:
    """A match's kernel for any strides: x, the filter and a residual copied into the layout
    where they are not in it, y returned in logical order (a view)."""

    def __init__(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]):
        self.launchable = get_launchable(cba_signature_for(spec, inputs), inputs[0].device)
        self._to_stored = layouts.to_physical(spec["layout"])
        self._back = layouts.to_logical(spec["layout"])
        #: per input, whether the layout stores it (x, the filter, a residual) or it is a vector
        self.in_layout = [index < 2 or (bool(spec.get("residual")) and index == len(inputs) - 1)
                          for index in range(len(inputs))]

    def stored(self, t: torch.Tensor) -> torch.Tensor:
        """x, the filter or a residual (logical order) as the layout stores it: a view."""
        return layouts.permute(t, self._to_stored)

    def logical(self, y: torch.Tensor) -> torch.Tensor:
        """The kernel's output back in logical order: a view."""
        return layouts.permute(y, self._back)

    def __call__(self, *inputs: torch.Tensor) -> torch.Tensor:
        y = self.launchable(*((self.stored(t) if stored else t).contiguous()
                              for t, stored in zip(inputs, self.in_layout)))
        return self.logical(y)


PATTERNS = (ConvBatchNormInference(),)
