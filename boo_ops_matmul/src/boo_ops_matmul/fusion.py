"""Fusion patterns for the torch.compile backends: mm, addmm and bmm, each with the
activation that follows it when the product (or its only view: a linear layer on a 3-D
input) has that one user, and an mm whose result,
viewed in another shape, has a bias row added (what AOTAutograd makes of ``F.linear`` on a
non-contiguous 3-D input, as ``nn.MultiheadAttention``'s input projection)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.fx

from boo_core.plugins.patterns import BoundLaunch, FusionMatch, FusionPattern, only_user, tensor_value

from .eager import boo_matmul, bound_matmul, matmul_signature_for
from .signature import ACTIVATIONS, MatmulSignature

aten = torch.ops.aten

_ACTIVATION_OPS = {aten.relu.default: "relu", aten.gelu.default: "gelu", aten.silu.default: "silu"}


class _Product(FusionPattern):
    """What the patterns share. The spec holds boo_matmul's alpha, beta and activation, and
    ``operand``: what a third input is (``"c"``, ``"bias"``, or None for none)."""

    def _match(self, node: torch.fx.Node, inputs: tuple[torch.fx.Node, ...], spec: dict[str, Any]) -> FusionMatch:
        view = _view_of(node)  # an activation applies to each element: it may follow the product's view
        product = node if view is None else view
        user = only_user(product)
        activation = _ACTIVATION_OPS.get(user.target) if user is not None and user.op == "call_function" else None
        if activation and user.args == (product,) and user.kwargs.get("approximate", "none") == "none":
            if view is None:
                return FusionMatch((node, user), inputs, {**spec, "activation": activation})
            shape = [int(d) for d in tensor_value(view).shape]
            return FusionMatch((node, view, user), inputs, {**spec, "activation": activation, "view": shape})
        return FusionMatch((node,), inputs, {**spec, "activation": None})

    def signatures(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> list[MatmulSignature]:
        return [matmul_signature_for(*_positional(spec, inputs), **_keywords(spec, inputs))]

    def launch(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> torch.Tensor:
        return _viewed(spec, boo_matmul(*_positional(spec, inputs), **_keywords(spec, inputs)))

    def bind(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> BoundLaunch | None:
        bias = inputs[2] if spec["operand"] == "bias" else None  # bound_matmul takes a (1, N) row as it is
        call = bound_matmul(*_positional(spec, inputs), **{**_keywords(spec, inputs), "bias": bias})
        if call is None or spec.get("view") is None:
            return call

        def viewed(*tensors: torch.Tensor) -> torch.Tensor | None:
            y = call(*tensors)
            return None if y is None else _viewed(spec, y)

        return viewed

    def reference(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> torch.Tensor:
        a, b, *rest = inputs
        y = spec["alpha"] * torch.matmul(a, b)
        if rest:
            y = y + (spec["beta"] * rest[0] if spec["operand"] == "c" else rest[0])
        return _viewed(spec, ACTIVATIONS[spec["activation"]](y) if spec["activation"] else y)


def _viewed(spec: Mapping[str, Any], y: torch.Tensor) -> torch.Tensor:
    """The product in the shape the matched view gave it (``spec["view"]``), if any."""
    return y if spec.get("view") is None else y.view(spec["view"])


def _positional(spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    a, b, *rest = inputs
    return (a, b, rest[0]) if spec["operand"] == "c" else (a, b)


def _keywords(spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> dict[str, Any]:
    bias = inputs[2].reshape(-1) if spec["operand"] == "bias" else None
    return dict(alpha=spec["alpha"], beta=spec["beta"], bias=bias, activation=spec["activation"])


class MatmulMM(_Product):
    """``aten.mm(a, b)``."""

    name = "matmul.mm"
    anchors = (aten.mm.default,)

    def match(self, node: torch.fx.Node) -> FusionMatch | None:
        biased = _viewed_bias_add(node)
        if biased is not None:
            return biased
        return self._match(node, tuple(node.args[:2]), {"alpha": 1.0, "beta": 0.0, "operand": None})


_VIEWS = (aten.view.default, aten._unsafe_view.default)


def _view_of(node: torch.fx.Node) -> torch.fx.Node | None:
    """The view that is ``node``'s only user, if it is one (of static shape)."""
    view = only_user(node)
    if view is None or view.op != "call_function" or view.target not in _VIEWS or view.args[0] is not node \
            or tensor_value(view) is None:
        return None
    return view


def _viewed_bias_add(mm: torch.fx.Node) -> FusionMatch | None:
    """``add(view(mm(a, b), shape), bias)`` with ``bias`` a row of N values in the product's
    dtype: the product with a bias, viewed (module docstring)."""
    view = _view_of(mm)
    if view is None:
        return None
    add = only_user(view)
    if add is None or add.op != "call_function" or add.target is not aten.add.Tensor or len(add.args) != 2 \
            or add.kwargs or add.args[0] is not view or not isinstance(add.args[1], torch.fx.Node):
        return None
    product, bias, result = tensor_value(mm), tensor_value(add.args[1]), tensor_value(add)
    if product is None or bias is None or result is None or bias.dim() != 1 or bias.numel() != product.shape[-1] \
            or bias.dtype != product.dtype or result.dtype != product.dtype:
        return None
    spec = {"alpha": 1.0, "beta": 0.0, "operand": "bias", "activation": None, "view": [int(d) for d in result.shape]}
    return FusionMatch((mm, view, add), (*mm.args[:2], add.args[1]), spec)


class MatmulBMM(_Product):
    """``aten.bmm(a, b)``: one batch of products."""

    name = "matmul.bmm"
    anchors = (aten.bmm.default,)

    def match(self, node: torch.fx.Node) -> FusionMatch | None:
        return self._match(node, tuple(node.args[:2]), {"alpha": 1.0, "beta": 0.0, "operand": None})


class MatmulAddmm(_Product):
    """``aten.addmm(input, a, b, beta=, alpha=)``: a linear layer when ``input`` is a bias
    row (N values, beta 1), ``beta * C + alpha * a @ b`` when it is a full M×N matrix."""

    name = "matmul.addmm"
    anchors = (aten.addmm.default,)

    def match(self, node: torch.fx.Node) -> FusionMatch | None:
        addend, a, b = node.args[:3]
        beta, alpha = float(node.kwargs.get("beta", 1)), float(node.kwargs.get("alpha", 1))
        addend_value, result = tensor_value(addend), tensor_value(node)
        if addend_value is None or result is None:
            return None
        if addend_value.numel() == result.shape[-1] and addend_value.dim() <= 2 and beta == 1.0:
            operand = "bias"
        elif tuple(addend_value.shape) == tuple(result.shape):
            operand = "c"
        else:  # another broadcast: leave it to PyTorch
            return None
        return self._match(node, (a, b, addend), {"alpha": alpha, "beta": beta, "operand": operand})


PATTERNS: tuple[FusionPattern, ...] = (MatmulAddmm(), MatmulMM(), MatmulBMM())
