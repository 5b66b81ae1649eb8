"""Fusion patterns for the torch.compile backends: ``aten.native_layer_norm`` (what
``F.layer_norm`` and ``nn.LayerNorm`` become after AOTAutograd) and its backward,
``aten.native_layer_norm_backward`` (which the backends offer only under
``BOO_USE_BACKWARD_KERNELS=1``).

PyTorch's mean and rstd keep the normalized dims (shape ``dims[:o] + [1] * k``) and, on the
CPU, have x's dtype; BOO's have shape ``dims[:o]`` and float32. The patterns convert.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch
import torch.fx

from boo_core.plugins.patterns import BoundLaunch, ContiguousFirst, FusionMatch, FusionPattern
from boo_core.signatures.dtypes import dtype_from_name, short_name

from .eager import backward_launchable, by_gradient, forward_launchable, layer_norm_signature_for
from .signature import GRADIENTS, LayerNormSignature

aten = torch.ops.aten


def _split(spec: Mapping[str, Any], params: Sequence[torch.Tensor]) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    params = list(params)
    weight = params.pop(0) if spec["weight"] else None
    bias = params.pop(0) if spec["bias"] else None
    return weight, bias


def _keepdim(signature: LayerNormSignature) -> tuple[int, ...]:
    return signature.stats_shape + (1,) * len(signature.normalized_shape)


def _as_torch_returns(spec: Mapping[str, Any], signature: LayerNormSignature,
                     outputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """The forward kernel's ``(y, mean, rstd)`` as ``native_layer_norm`` returns them."""
    y, mean, rstd = outputs
    keep, dtype = _keepdim(signature), dtype_from_name(spec["stats_dtype"])
    return y, mean.reshape(keep).to(dtype), rstd.reshape(keep).to(dtype)


def _reshaping(shape: Sequence[int]) -> Callable[[torch.Tensor], torch.Tensor]:
    return lambda t: t.reshape(shape)


def _dense(tensors: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """``tensors`` as the kernels take them: contiguous (a tensor that is stays itself)."""
    return tuple(t.contiguous() for t in tensors)


def _densing(call: Callable[..., Any], examples: Sequence[torch.Tensor]) -> Callable[..., Any]:
    """``call`` (bound for contiguous tensors) for tensors laid out like ``examples``: where
    one is not contiguous (a batch-first attention's residual stream, whose rows lie in
    sequence-first order), the call copies it first, which the general launch did too, after
    its lookups and checks."""
    return call if all(t.is_contiguous() for t in examples) else ContiguousFirst(call)


def _reads_statistics(node: torch.fx.Node) -> bool:
    """Whether the graph reads ``native_layer_norm``'s mean or rstd (anything but ``y = out[0]``)."""
    return any(user.target is not operator.getitem or user.args[1] != 0 for user in node.users)


class LayerNormForward(FusionPattern):
    """``aten.native_layer_norm(x, normalized_shape, weight, bias, eps) -> (y, mean, rstd)``."""

    name = "layernorm.forward"
    anchors = (aten.native_layer_norm.default,)

    def match(self, node: torch.fx.Node) -> FusionMatch | None:
        x, normalized_shape, weight, bias, eps = node.args[:5]
        value = node.meta.get("val")
        try:
            normalized = [int(d) for d in normalized_shape]
        except TypeError:  # symbolic sizes: leave it to PyTorch
            return None
        if not isinstance(value, (tuple, list)) or not isinstance(value[1], torch.Tensor):
            return None
        spec = {"normalized_shape": normalized, "eps": float(eps), "weight": weight is not None,
                "bias": bias is not None, "stats_dtype": short_name(value[1].dtype),
                "stats_read": _reads_statistics(node)}
        return FusionMatch((node,), tuple(t for t in (x, weight, bias) if t is not None), spec)

    def signatures(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> list[LayerNormSignature]:
        x, *params = inputs
        return [layer_norm_signature_for(x, spec["normalized_shape"], *_split(spec, params), spec["eps"])]

    def launch(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        x, *params = inputs
        forward = forward_launchable(x, tuple(spec["normalized_shape"]), *_split(spec, params), spec["eps"])
        return _as_torch_returns(spec, forward.signature, forward(*(t.contiguous() for t in inputs)))

    def bind(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> BoundLaunch:
        x, *params = inputs
        forward = forward_launchable(x, tuple(spec["normalized_shape"]), *_split(spec, params), spec["eps"])

        def run(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...] | None:
            outputs = forward.try_call(*_dense(tensors))
            return None if outputs is None else _as_torch_returns(spec, forward.signature, outputs)

        # On a GPU, the statistics are returned as views of the kernel's where torch's dtype is theirs.
        keep = _keepdim(forward.signature)
        if dtype_from_name(spec["stats_dtype"]) != forward.signature.output_specs()[1].dtype:
            return run
        # An inference graph reads only y: the kernel writes the statistics where no one allocates them.
        discarded = () if spec.get("stats_read", True) else (1, 2)
        direct = forward.bind(_dense(inputs), (), (None, _reshaping(keep), _reshaping(keep)), discarded=discarded)
        return run if direct is None else _densing(direct.or_else(run), inputs)

    def reference(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        x, *params = inputs
        return aten.native_layer_norm(x, spec["normalized_shape"], *_split(spec, params), spec["eps"])


class LayerNormBackward(FusionPattern):
    """``aten.native_layer_norm_backward(dy, x, normalized_shape, mean, rstd, weight, bias,
    output_mask) -> (dx, dw, db)``, None where the mask is off. The kernel call takes
    ``(dy, x, mean, rstd[, weight])``: the bias only says that db exists, and a call that
    passed it to the kernel's direct call would be refused there (it takes what the kernel reads)."""

    name = "layernorm.backward"
    anchors = (aten.native_layer_norm_backward.default,)

    def match(self, node: torch.fx.Node) -> FusionMatch | None:
        dy, x, normalized_shape, mean, rstd, weight, bias, mask = node.args[:8]
        try:
            normalized = [int(d) for d in normalized_shape]
        except TypeError:
            return None
        spec = {"normalized_shape": normalized, "weight": weight is not None, "bias": bias is not None,
                "mask": [bool(m) for m in mask]}
        return FusionMatch((node,), tuple(t for t in (dy, x, mean, rstd, weight) if t is not None), spec)

    def _forward(self, spec: Mapping[str, Any], x: torch.Tensor) -> LayerNormSignature:
        # eps does not enter the backward (rstd carries it): the default names the kernel.
        return LayerNormSignature(tuple(x.shape), x.dim() - len(spec["normalized_shape"]), weight=spec["weight"],
                                  bias=spec["bias"], dtype=x.dtype)

    def _gradients(self, spec: Mapping[str, Any]) -> tuple[str, ...]:
        present = (True, spec["weight"], spec["bias"])
        return tuple(g for g, wanted, there in zip(GRADIENTS, spec["mask"], present) if wanted and there)

    def signatures(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> list[LayerNormSignature]:
        gradients = self._gradients(spec)
        return [replace(self._forward(spec, inputs[1]), mode="bwd", gradients=gradients)] if gradients else []

    def launch(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> tuple[torch.Tensor | None, ...]:
        dy, x, mean, rstd, *params = inputs
        gradients = self._gradients(spec)
        if not gradients:
            return (None, None, None)
        forward = self._forward(spec, x)
        weight = params[0] if params else None
        stats = [t.reshape(forward.stats_shape).to(forward.stats_dtype).contiguous() for t in (mean, rstd)]
        outputs = backward_launchable(forward, gradients, x.device)(
            dy.contiguous(), x.contiguous(), *stats, *(() if weight is None else (weight.contiguous(),)))
        found = by_gradient(gradients, outputs)
        return tuple(found.get(g) for g in GRADIENTS)

    def bind(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> BoundLaunch | None:
        gradients = self._gradients(spec)
        if not gradients:
            return None
        forward = self._forward(spec, inputs[1])
        kernel = backward_launchable(forward, gradients, inputs[1].device)
        stats_shape, stats_dtype = forward.stats_shape, forward.stats_dtype

        def run(dy: torch.Tensor, x: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor,
                *params: torch.Tensor) -> tuple[torch.Tensor | None, ...] | None:
            stats = (mean.reshape(stats_shape).to(stats_dtype), rstd.reshape(stats_shape).to(stats_dtype))
            outputs = kernel.try_call(*_dense((dy, x, *stats, *params)))
            if outputs is None:
                return None
            found = by_gradient(gradients, outputs)
            return tuple(found.get(g) for g in GRADIENTS)

        # On a GPU, tensors laid out as bound go to the kernel as they are (the statistics' reshapes are views).
        if inputs[2].dtype != stats_dtype or inputs[3].dtype != stats_dtype:
            return run
        direct = kernel.bind(_dense(inputs), (None, None, _reshaping(stats_shape), _reshaping(stats_shape)))
        if direct is None:
            return run
        if gradients == GRADIENTS:  # the kernel returns (dx, dw, db): the node's values as they are
            return _densing(direct.or_else(run), inputs)

        def run_direct(dy: torch.Tensor, x: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor,
                       *params: torch.Tensor) -> tuple[torch.Tensor | None, ...] | None:
            outputs = direct.try_launch(dy, x, mean, rstd, *params)
            if outputs is None:
                return run(dy, x, mean, rstd, *params)
            found = by_gradient(gradients, outputs)
            return tuple(found.get(g) for g in GRADIENTS)

        return _densing(run_direct, inputs)

    def reference(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> tuple[torch.Tensor | None, ...]:
        dy, x, mean, rstd, *params = inputs
        weight = params[0] if params else None
        # torch's kernels read only the bias's metadata (db's shape and dtype): a stand-in has it.
        bias = torch.empty(spec["normalized_shape"], dtype=dy.dtype, device=dy.device) if spec["bias"] else None
        return aten.native_layer_norm_backward(dy, x, spec["normalized_shape"], mean, rstd, weight, bias,
                                               spec["mask"])


PATTERNS: tuple[FusionPattern, ...] = (LayerNormForward(), LayerNormBackward())
