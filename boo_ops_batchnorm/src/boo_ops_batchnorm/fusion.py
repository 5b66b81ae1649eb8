"""Fusion patterns for the torch.compile backends. After AOTAutograd a ``BatchNorm`` is:

* in inference, ``aten._native_batch_norm_legit_no_training(x, weight, bias, running_mean,
  running_var, momentum, eps) -> (y, empty, empty)``; where only y is used and a ReLU
  follows, the batch norm and the ReLU are one kernel;
* in training, ``aten._native_batch_norm_legit_functional(x, weight, bias, running_mean,
  running_var, training, momentum, eps) -> (y, mean, invstd, new running_mean, new
  running_var)``;
* its gradient, ``aten.native_batch_norm_backward(dy, x, weight, running_mean, running_var,
  save_mean, save_invstd, train, eps, output_mask) -> (dx, dweight, dbias)`` (which the
  backends offer only under ``BOO_USE_BACKWARD_KERNELS=1``).

Torch's statistics and running statistics may be in x's dtype (a model moved to bf16 keeps
its buffers in bf16); BOO's kernels take and give float32. The patterns convert, to the
dtypes of the matched node's own outputs: a traced training batch norm of bf16 buffers
returns its new running statistics in float32, which the graph then copies into the buffers.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.fx

from boo_core import Launchable, launchable_for
from boo_core.dynamo.patterns import BoundLaunch, Decline, FusionMatch, FusionPattern, only_user
from boo_core.signatures.dtypes import dtype_from_name, short_name

from .eager import backward_launchable, batch_norm_signature_for
from .layout import logical, memory_format_of, stored
from .signature import BatchNormSignature

aten = torch.ops.aten
_RELU = (aten.relu.default,)


def _forward_signature(spec: Mapping[str, Any], x: torch.Tensor) -> BatchNormSignature:
    return batch_norm_signature_for(x, spec["mode"] == "train", True, spec["eps"], spec.get("activation"))


def _kernel(spec: Mapping[str, Any], x: torch.Tensor) -> Launchable:
    signature = _forward_signature(spec, x)
    return launchable_for(("bnorm", signature), lambda: signature, x.device)


def _params(spec: Mapping[str, Any], x: torch.Tensor, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """weight, bias (ones and zeros where the module has none), running mean and variance
    in float32, then the momentum of a training forward: what the kernel takes after x.
    The tensors made here are made on every call, never kept: under CUDA graph trees a call
    allocates from the graph's memory pool, even while it warms up, and a pool tensor kept
    alive past the call is what they refuse ("not tracked as outputs")."""
    def constant(value: float, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        return torch.full(shape, value, dtype=dtype, device=x.device)

    tensors = list(tensors)
    weight = tensors.pop(0) if spec["weight"] else constant(1.0, (x.shape[1],), x.dtype)
    bias = tensors.pop(0) if spec["bias"] else constant(0.0, (x.shape[1],), x.dtype)
    stats = torch.promote_types(x.dtype, torch.float32)
    running = [t.to(stats) for t in tensors[:2]]
    momentum = [constant(spec["momentum"], (1,), stats)] if spec["mode"] == "train" else []
    return [weight, bias, *running, *momentum]


def _as_torch_returns(spec: Mapping[str, Any], signature: BatchNormSignature, outputs: Any) -> Any:
    """The kernel's outputs as the matched root returns them."""
    if spec["mode"] == "infer":
        y = logical(outputs, signature)
        if spec.get("activation"):
            return y
        # statistics nothing reads (match declines otherwise), as many as the traced op gives:
        # none on the CPU, one per channel on CUDA
        unread = torch.empty(spec.get("stats_numel", 0), dtype=dtype_from_name(spec["stats_dtype"]), device=y.device)
        return y, unread, unread.clone()
    y, mean, invstd, new_mean, new_var = outputs
    running = dtype_from_name(spec["running_dtype"])
    stats = dtype_from_name(spec["stats_dtype"])
    return logical(y, signature), mean.to(stats), invstd.to(stats), new_mean.to(running), new_var.to(running)


class _BatchNormForward(FusionPattern):
    """What the two forward patterns share: the kernel call, bound once per graph."""

    mode: str

    def _spec(self, node: torch.fx.Node, weight: Any, bias: Any, running_mean: Any, momentum: Any,
              eps: Any) -> dict[str, Any]:
        value = node.meta.get("val")
        running = value[3] if len(value) > 3 else running_mean.meta["val"]  # training returns new ones
        return {"mode": self.mode, "weight": weight is not None, "bias": bias is not None, "eps": float(eps),
                "momentum": float(momentum), "stats_dtype": short_name(value[1].dtype),
                "stats_numel": int(value[1].numel()), "running_dtype": short_name(running.dtype)}

    def signatures(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> list[BatchNormSignature]:
        return [_forward_signature(spec, inputs[0])]

    def launch(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> Any:
        x, *rest = inputs
        kernel = _kernel(spec, x)
        outputs = kernel(stored(x, kernel.signature), *_params(spec, x, rest))
        return _as_torch_returns(spec, kernel.signature, outputs)

    def bind(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> BoundLaunch:
        kernel = _kernel(spec, inputs[0])
        signature = kernel.signature

        def run(x: torch.Tensor, *rest: torch.Tensor) -> Any:
            outputs = kernel.try_call(stored(x, signature), *_params(spec, x, rest))
            return None if outputs is None else _as_torch_returns(spec, signature, outputs)

        return run


class BatchNormInference(_BatchNormForward):
    """``aten._native_batch_norm_legit_no_training`` (+ ``aten.relu`` of its output)."""

    name = "bnorm.inference"
    anchors = (aten._native_batch_norm_legit_no_training.default,)
    mode = "infer"

    def match(self, node: torch.fx.Node) -> FusionMatch | Decline | None:
        x, weight, bias, running_mean, running_var, momentum, eps = node.args[:7]
        if any(u.target is not operator.getitem or (u.args[1] != 0 and u.users) for u in node.users):
            return Decline("the graph reads the inference batch norm's statistics outputs")
        spec = self._spec(node, weight, bias, running_mean, momentum, eps)
        inputs = tuple(t for t in (x, weight, bias, running_mean, running_var) if t is not None)
        y = only_user(node)
        relu = only_user(y) if y is not None and y.target is operator.getitem and y.args[1] == 0 else None
        if relu is not None and relu.target in _RELU:
            return FusionMatch((node, y, relu), inputs, {**spec, "activation": "relu"})
        return FusionMatch((node,), inputs, spec)

    def reference(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> Any:
        x, *rest = inputs
        weight = rest.pop(0) if spec["weight"] else None
        bias = rest.pop(0) if spec["bias"] else None
        out = aten._native_batch_norm_legit_no_training(x, weight, bias, rest[0], rest[1], spec["momentum"],
                                                        spec["eps"])
        return torch.relu(out[0]) if spec.get("activation") else out


class BatchNormTraining(_BatchNormForward):
    """``aten._native_batch_norm_legit_functional`` with ``training=True``."""

    name = "bnorm.training"
    anchors = (aten._native_batch_norm_legit_functional.default,)
    mode = "train"

    def match(self, node: torch.fx.Node) -> FusionMatch | Decline | None:
        x, weight, bias, running_mean, running_var, training, momentum, eps = node.args[:8]
        if not training:
            return Decline("a functional batch norm with training=False (BOO runs inference from the "
                           "_no_training op)")
        spec = self._spec(node, weight, bias, running_mean, momentum, eps)
        return FusionMatch((node,), tuple(t for t in (x, weight, bias, running_mean, running_var) if t is not None),
                           spec)

    def reference(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> Any:
        x, *rest = inputs
        weight = rest.pop(0) if spec["weight"] else None
        bias = rest.pop(0) if spec["bias"] else None
        return aten._native_batch_norm_legit_functional(x, weight, bias, rest[0], rest[1], True, spec["momentum"],
                                                        spec["eps"])


class BatchNormBackward(FusionPattern):
    """``aten.native_batch_norm_backward`` of a training forward (saved statistics given)."""

    name = "bnorm.backward"
    anchors = (aten.native_batch_norm_backward.default,)

    def match(self, node: torch.fx.Node) -> FusionMatch | Decline | None:
        dy, x, weight, _, _, save_mean, save_invstd, train, eps, mask = node.args[:10]
        if not train or save_mean is None or save_invstd is None:
            return Decline("the gradient of an inference batch norm (BOO's backward is the training one's)")
        if weight is None:
            return Decline("a batch norm without weight (BOO's backward takes one)")
        spec = {"eps": float(eps), "mask": [bool(m) for m in mask]}
        return FusionMatch((node,), (dy, x, weight, save_mean, save_invstd), spec)

    def _kernel(self, spec: Mapping[str, Any], x: torch.Tensor) -> Launchable:
        return backward_launchable(batch_norm_signature_for(x, True, False, spec["eps"]), x.device)

    def signatures(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> list[BatchNormSignature]:
        return [self._kernel(spec, inputs[1]).signature]

    def _run(self, kernel: Launchable, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor],
             call: Any) -> tuple[torch.Tensor | None, ...] | None:
        dy, x, weight, mean, invstd = inputs
        signature = kernel.signature
        stats = [t.to(signature.stats_dtype) for t in (mean, invstd)]
        outputs = call(stored(x, signature), stored(dy.contiguous(memory_format=memory_format_of(x)), signature),
                       weight, *stats)
        if outputs is None:
            return None
        dx, dw, db = outputs
        return tuple(t if wanted else None for t, wanted in zip((logical(dx, signature), dw, db), spec["mask"]))

    def launch(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> tuple[torch.Tensor | None, ...]:
        kernel = self._kernel(spec, inputs[1])
        return self._run(kernel, spec, inputs, kernel)

    def bind(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> BoundLaunch:
        kernel = self._kernel(spec, inputs[1])
        return lambda *tensors: self._run(kernel, spec, tensors, kernel.try_call)

    def reference(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> tuple[torch.Tensor | None, ...]:
        dy, x, weight, mean, invstd = inputs
        return aten.native_batch_norm_backward(dy, x, weight, None, None, mean, invstd, True, spec["eps"],
                                               spec["mask"])


PATTERNS: tuple[FusionPattern, ...] = (BatchNormInference(), BatchNormTraining(), BatchNormBackward())
