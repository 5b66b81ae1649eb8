"""Fusion patterns for the torch.compile backends: ``aten._softmax`` and ``aten._log_softmax``
(what ``torch.softmax``, ``F.log_softmax``, ``nn.Softmax``... become after AOTAutograd), and
their backward ops, which the backends offer only under ``BOO_USE_BACKWARD_KERNELS=1``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch
import torch.fx

from boo_core.plugin import Decline, FusionMatch, FusionPattern, tensor_value

from .eager import boo_softmax, boo_softmax_backward, softmax_signature_for
from .signature import SoftmaxSignature

aten = torch.ops.aten


class SoftmaxForward(FusionPattern):
    """``aten._softmax(x, dim, half_to_float)`` and ``aten._log_softmax(x, dim, half_to_float)``."""

    name = "softmax.forward"
    anchors = (aten._softmax.default, aten._log_softmax.default)

    def match(self, node: torch.fx.Node) -> FusionMatch | Decline:
        x, dim, half_to_float = node.args[:3]
        if half_to_float:
            return Decline("a float32 result from a half input (BOO's result has the input's dtype)")
        return FusionMatch((node,), (x,), {"dim": dim, "log": node.target == aten._log_softmax.default})

    def signatures(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> list[SoftmaxSignature]:
        return [softmax_signature_for(inputs[0], spec["dim"], spec["log"])]

    def launch(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> torch.Tensor:
        return boo_softmax(inputs[0], spec["dim"], spec["log"])

    def reference(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> torch.Tensor:
        return (torch.log_softmax if spec["log"] else torch.softmax)(inputs[0], spec["dim"])


class SoftmaxBackward(FusionPattern):
    """``aten._softmax_backward_data(dy, y, dim, input_dtype)`` and its log-softmax twin."""

    name = "softmax.backward"
    anchors = (aten._softmax_backward_data.default, aten._log_softmax_backward_data.default)

    def match(self, node: torch.fx.Node) -> FusionMatch | Decline:
        dy, y, dim, input_dtype = node.args[:4]
        value = tensor_value(node)
        if value is None or value.dtype != input_dtype:
            return Decline("the gradient's dtype differs from the output's")
        log = node.target == aten._log_softmax_backward_data.default
        return FusionMatch((node,), (y, dy), {"dim": dim, "log": log})

    def signatures(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> list[SoftmaxSignature]:
        return [replace(softmax_signature_for(inputs[0], spec["dim"], spec["log"]), mode="bwd")]

    def launch(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> torch.Tensor:
        y, dy = inputs
        return boo_softmax_backward(y, dy, spec["dim"], spec["log"])

    def reference(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> torch.Tensor:
        y, dy = inputs
        op = aten._log_softmax_backward_data if spec["log"] else aten._softmax_backward_data
        return op(dy, y, spec["dim"], y.dtype)


PATTERNS: tuple[FusionPattern, ...] = (SoftmaxForward(), SoftmaxBackward())
