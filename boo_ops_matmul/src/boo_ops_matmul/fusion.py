"""Fusion patterns for the torch.compile backends: mm, addmm and bmm, each with the
activation that follows it when the product (or its only view: a linear layer on a 3-D
input) has that one user, or else with the residual added to it (``x + linear(y)``, a
transformer block's sums: the kernel's ``beta * C``), and an mm whose result,
viewed in another shape, has a bias row added (what AOTAutograd makes of ``F.linear`` on a
non-contiguous 3-D input, as ``nn.MultiheadAttention``'s input projection)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.fx

from boo_core.plugins.patterns import BoundLaunch, ContiguousFirst, FusionMatch, FusionPattern, only_user, tensor_value

from .eager import boo_matmul, bound_matmul, matmul_signature_for
from .signature import ACTIVATIONS, MatmulSignature

aten = torch.ops.aten

_ACTIVATION_OPS = {aten.relu.default: "relu", aten.gelu.default: "gelu", aten.silu.default: "silu"}


class _Product(FusionPattern):
    """What the patterns share. The spec holds boo_matmul's alpha, beta and activation,
    ``operand``: what a third input is (``"c"``, ``"bias"``, or None for none), and
    ``residual``: whether an input of the result's shape is added to the product (the
    kernel's C, beta 1). Inputs come in the kernel's order: a, b, then C or the residual,
    then the bias."""

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
        residual = _residual_add(product) if spec["operand"] != "c" else None
        if residual is not None:
            add, r = residual
            viewed = {} if view is None else {"view": [int(d) for d in tensor_value(view).shape]}
            return FusionMatch((node, *(() if view is None else (view,)), add), (*inputs[:2], r, *inputs[2:]),
                               {**spec, "activation": None, "residual": True, **viewed})
        return FusionMatch((node,), inputs, {**spec, "activation": None})

    def signatures(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> list[MatmulSignature]:
        return [matmul_signature_for(*_positional(spec, inputs), **_keywords(spec, inputs))]

    def launch(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> torch.Tensor:
        return _viewed(spec, boo_matmul(*_positional(spec, inputs), **_keywords(spec, inputs)))

    def bind(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> BoundLaunch | None:
        a, b, c, bias = _operands(spec, inputs)  # bound_matmul takes a (1, N) bias row as it is
        residual_shape = _product_shape(a, b) if spec.get("residual") else None  # r viewed in the product's
        call = bound_matmul(a, b, c, **{**_keywords(spec, inputs), "bias": bias}, c_shape=residual_shape)
        if call is None:
            return self._bind_copying(spec, inputs)
        if spec.get("view") is None:
            return call

        def viewed(*tensors: torch.Tensor) -> torch.Tensor | None:
            y = call(*tensors)
            return None if y is None else _viewed(spec, y)

        return viewed

    def _bind_copying(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> BoundLaunch | None:
        """Where an input is laid out as no kernel takes it (a class token's rows, a residual
        stream in sequence-first order), the call bound for it made contiguous, which the
        call then makes it: the copy the general launch makes too, without its lookups."""
        copied = frozenset(i for i, t in enumerate(inputs) if not _kernel_ready(t, operand=i < 2))
        if not copied:
            return None
        call = self.bind(spec, [t.contiguous() if i in copied else t for i, t in enumerate(inputs)])
        if call is None:
            return None
        return ContiguousFirst(call, copied)

    def reference(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> torch.Tensor:
        a, b, c, bias = _operands(spec, inputs)
        y = spec["alpha"] * torch.matmul(a, b)
        if c is not None:
            y = y + (c.reshape(y.shape) if spec.get("residual") else spec["beta"] * c)
        if bias is not None:
            y = y + bias
        return _viewed(spec, ACTIVATIONS[spec["activation"]](y) if spec["activation"] else y)


def _viewed(spec: Mapping[str, Any], y: torch.Tensor) -> torch.Tensor:
    """The product in the shape the matched view gave it (``spec["view"]``), if any."""
    return y if spec.get("view") is None else y.view(spec["view"])


def _kernel_ready(t: torch.Tensor, *, operand: bool) -> bool:
    """Whether a kernel takes ``t`` as it is: dense, or for a product's operand (a or b) the
    transpose of a dense tensor."""
    return t.is_contiguous() or (operand and t.dim() >= 2 and t.mT.is_contiguous())


def _product_shape(a: torch.Tensor, b: torch.Tensor) -> tuple[int, ...]:
    return (*a.shape[:-1], b.shape[-1])


def _operands(spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> tuple[torch.Tensor | None, ...]:
    """``(a, b, c, bias)`` of a match's inputs: c is addmm's C or the residual (in the shape
    the graph gives it), None where absent; the bias as the graph gives it."""
    a, b, *rest = inputs
    c = rest.pop(0) if spec["operand"] == "c" or spec.get("residual") else None
    bias = rest.pop(0) if spec["operand"] == "bias" else None
    return a, b, c, bias


def _positional(spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    a, b, c, _ = _operands(spec, inputs)
    if c is None:
        return a, b
    return a, b, c.reshape(_product_shape(a, b)) if spec.get("residual") else c


def _keywords(spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> dict[str, Any]:
    bias = _operands(spec, inputs)[3]
    beta = 1.0 if spec.get("residual") else spec["beta"]
    return dict(alpha=spec["alpha"], beta=beta, bias=None if bias is None else bias.reshape(-1),
                activation=spec["activation"])


def _residual_add(product: torch.fx.Node) -> tuple[torch.fx.Node, torch.fx.Node] | None:
    """``(add, r)`` where ``add(product, r)`` or ``add(r, product)`` is ``product``'s only
    user, ``r`` a tensor of its shape and dtype (no broadcast, no scale)."""
    add = only_user(product)
    if add is None or add.op != "call_function" or add.target is not aten.add.Tensor or len(add.args) != 2 \
            or add.kwargs:
        return None
    others = [arg for arg in add.args if arg is not product]
    if len(others) != 1 or not isinstance(others[0], torch.fx.Node):
        return None
    value, other, result = tensor_value(product), tensor_value(others[0]), tensor_value(add)
    if value is None or other is None or result is None or other.shape != value.shape or other.dtype != value.dtype \
            or result.dtype != value.dtype:
        return None
    return add, others[0]


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
