"""Fusion patterns for the torch.compile backends. After AOTAutograd a ``BatchNorm`` is:

* in inference, ``aten._native_batch_norm_legit_no_training(x, weight, bias, running_mean,
  running_var, momentum, eps) -> (y, mean, invstd)`` (the statistics empty on the CPU); where
  only y is used and a ReLU follows, the batch norm and the ReLU are one kernel; where a
  training graph saves the statistics (an eval-mode batch norm), they are made as torch's op
  makes them;
* in training, ``aten._native_batch_norm_legit_functional(x, weight, bias, running_mean,
  running_var, training, momentum, eps) -> (y, mean, invstd, new running_mean, new
  running_var)``;
* its gradient, ``aten.native_batch_norm_backward(dy, x, weight, running_mean, running_var,
  save_mean, save_invstd, train, eps, output_mask) -> (dx, dweight, dbias)`` (on BOO where
  ``BOO_USE_BACKWARD_KERNELS`` says so: by default on CUDA).

Torch's statistics and running statistics may be in x's dtype (a model moved to bf16 keeps
its buffers in bf16). BOO's kernels take the running statistics in the buffers' dtype
(``BatchNormSignature.running_dtype``). A traced training batch norm of bf16 buffers returns
its new running statistics in float32 and converts them to bf16 (``aten._to_copy``) for the
buffers: the training pattern takes those conversions into its kernel, and the ReLU after it
where there is one (``FusionMatch.applied``), and before that ReLU a residual block's sum
(``add(y, r)``, r made before the batch norm: of two batch norms summed, the later one takes
it). Saved statistics are float32, as torch's are on CUDA; where the graph wants another
dtype the patterns convert.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.fx
from torch._subclasses.fake_tensor import unset_fake_temporarily

from boo_core import Launchable, conversion_of, launchable_for
from boo_core.plugins.patterns import (
    BoundLaunch,
    Decline,
    FusionMatch,
    FusionPattern,
    only_user,
    read_before,
    tensor_value,
)
from boo_core.signatures.dtypes import dtype_from_name, short_name

from .eager import AUTO_DECLINES_CHANNELS_FIRST, backward_launchable, batch_norm_signature_for, gradients_on_boo
from .layout import logical, memory_format_of, stored
from .signature import FLOAT_DTYPES, BatchNormSignature

if TYPE_CHECKING:
    from boo_core.runtime.direct_call import DirectCall

aten = torch.ops.aten
_RELU = (aten.relu.default,)


def _forward_signature(spec: Mapping[str, Any], x: torch.Tensor) -> BatchNormSignature:
    return batch_norm_signature_for(x, spec["mode"] == "train", True, spec["eps"], spec.get("activation"),
                                    _kernel_running_dtype(spec), spec.get("residual", False))


def _kernel_running_dtype(spec: Mapping[str, Any]) -> torch.dtype | None:
    """The dtype the kernel reads (and writes) running statistics in; None: the stats dtype."""
    name = spec.get("kernel_running_dtype")
    return dtype_from_name(name) if name else None


def _kernel(spec: Mapping[str, Any], x: torch.Tensor) -> Launchable:
    signature = _forward_signature(spec, x)
    return launchable_for(("bnorm", signature), lambda: signature, x.device)


def _params(spec: Mapping[str, Any], signature: BatchNormSignature, x: torch.Tensor,
            tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """weight, bias (ones and zeros where the module has none), running mean and variance
    in the kernel's dtype for them, the residual (stored like x for the kernel of
    ``signature``), then the momentum of a training forward: what the kernel takes after x
    (a direct call binds its own momentum once: see :func:`_direct`).
    The tensors made here are made on every call, never kept: under CUDA graph trees a call
    allocates from the graph's memory pool, even while it warms up, and a pool tensor kept
    alive past the call is what they refuse ("not tracked as outputs")."""
    def constant(value: float, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        return torch.full(shape, value, dtype=dtype, device=x.device)

    tensors = list(tensors)
    weight = tensors.pop(0) if spec["weight"] else constant(1.0, (x.shape[1],), x.dtype)
    bias = tensors.pop(0) if spec["bias"] else constant(0.0, (x.shape[1],), x.dtype)
    stats = torch.promote_types(x.dtype, torch.float32)
    running = [t.to(_kernel_running_dtype(spec) or stats) for t in tensors[:2]]
    residual = [stored(t.contiguous(memory_format=memory_format_of(x)), signature) for t in tensors[2:3]]
    momentum = [constant(spec["momentum"], (1,), stats)] if spec["mode"] == "train" else []
    return [weight, bias, *running, *residual, *momentum]


def _as_torch_returns(spec: Mapping[str, Any], signature: BatchNormSignature, outputs: Any,
                      rest: Sequence[torch.Tensor] = ()) -> Any:
    """The kernel's outputs as the matched root returns them; an inference's statistics,
    where the graph reads them, from the running mean and variance among ``rest`` (the
    inputs after x: :func:`_inference_statistics`)."""
    if spec["mode"] == "infer":
        y = logical(outputs, signature)
        if spec.get("activation"):
            return y
        if spec.get("statistics_read") and spec.get("stats_numel", 0):
            return (y, *_inference_statistics(spec, *_running(spec, rest)))
        # as many statistics as the traced op gives: none on the CPU, one per channel on CUDA (unread)
        unread = torch.empty(spec.get("stats_numel", 0), dtype=dtype_from_name(spec["stats_dtype"]), device=y.device)
        return y, unread, unread.clone()
    y, mean, invstd, new_mean, new_var = outputs
    running = dtype_from_name(spec["running_dtype"])
    stats = dtype_from_name(spec["stats_dtype"])
    return logical(y, signature), mean.to(stats), invstd.to(stats), new_mean.to(running), new_var.to(running)


def _inference_statistics(spec: Mapping[str, Any], running_mean: torch.Tensor,
                          running_var: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """What ``aten._native_batch_norm_legit_no_training`` returns beside y off the CPU (where
    it returns empty tensors), as torch's own decomposition of it computes them: the running
    mean and ``1 / sqrt(running variance + eps)``, in the statistics' dtype. A training graph
    of an eval-mode batch norm (frozen statistics, gradients wanted) saves them for the
    backward, which reads the running statistics themselves in eval mode."""
    dtype = dtype_from_name(spec["stats_dtype"])
    return running_mean.to(dtype, copy=True), 1 / torch.sqrt(running_var.to(dtype) + spec["eps"])


def _running(spec: Mapping[str, Any], rest: Sequence[torch.Tensor]) -> Sequence[torch.Tensor]:
    """The running mean and variance among a forward's inputs after x."""
    first = int(spec["weight"]) + int(spec["bias"])
    return rest[first:first + 2]


def _direct(spec: Mapping[str, Any], kernel: Launchable, inputs: Sequence[torch.Tensor]) -> DirectCall | None:
    """The forward's kernel bound to tensors like ``inputs`` where the graph passes every
    argument as the kernel takes it and wants its outputs as the kernel gives them: a module
    with weight and bias, running statistics in the kernel's dtype for them (a training
    graph's conversions taken), and the single y of an inference batch norm with a ReLU
    (without one, the traced op also returns statistics nothing reads). A
    training forward's momentum is made here, once, and bound as the kernel's last argument."""
    signature = kernel.signature
    if inputs[0].device.type != "cuda":  # direct calls are CUDA launches (and a CPU build of
        return None                       # torch has no stream to ask about capture)
    if not (spec["weight"] and spec["bias"]) or torch.cuda.is_current_stream_capturing():
        return None
    if any(t.dtype != signature.running_stats_dtype for t in inputs[3:5]):
        return None
    if spec["mode"] == "infer" and not spec.get("activation"):
        return None
    if spec["mode"] == "train" and not (spec["stats_dtype"] == short_name(signature.stats_dtype)
                                        and spec["running_dtype"] == short_name(signature.running_stats_dtype)):
        return None
    constants = ()
    if spec["mode"] == "train":
        with unset_fake_temporarily():  # a real tensor, made outside any graph's memory pool
            constants = (torch.full((1,), spec["momentum"], dtype=signature.stats_dtype, device=inputs[0].device),)
    to_stored = lambda t: stored(t, signature)  # noqa: E731
    views = (to_stored, None, None, None, None, to_stored)[:len(inputs)]  # x and the residual
    return kernel.bind(inputs, views, (lambda y: logical(y, signature),), constants)


class _BatchNormForward(FusionPattern):
    """What the two forward patterns share: the kernel call, bound once per graph."""

    mode: str

    def _spec(self, node: torch.fx.Node, weight: Any, bias: Any, running_mean: Any, running_var: Any, momentum: Any,
              eps: Any) -> dict[str, Any]:
        value = node.meta.get("val")
        running = value[3] if len(value) > 3 else running_mean.meta["val"]  # training returns new ones
        spec = {"mode": self.mode, "weight": weight is not None, "bias": bias is not None, "eps": float(eps),
                "momentum": float(momentum), "stats_dtype": short_name(value[1].dtype),
                "stats_numel": int(value[1].numel()), "running_dtype": short_name(running.dtype)}
        if _buffers_dtype(running_mean, running_var) == spec["running_dtype"]:  # the kernel takes them as they are
            spec["kernel_running_dtype"] = spec["running_dtype"]
        return spec

    def signatures(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> list[BatchNormSignature]:
        return [_forward_signature(spec, inputs[0])]

    def launch(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> Any:
        x, *rest = inputs
        kernel = _kernel(spec, x)
        outputs = kernel(stored(x, kernel.signature), *_params(spec, kernel.signature, x, rest))
        return _as_torch_returns(spec, kernel.signature, outputs, rest)

    def bind(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> BoundLaunch:
        kernel = _kernel(spec, inputs[0])
        signature = kernel.signature

        def run(x: torch.Tensor, *rest: torch.Tensor) -> Any:
            outputs = kernel.try_call(stored(x, signature), *_params(spec, signature, x, rest))
            return None if outputs is None else _as_torch_returns(spec, signature, outputs, rest)

        direct = _direct(spec, kernel, inputs)
        return run if direct is None else direct.or_else(run)


class BatchNormInference(_BatchNormForward):
    """``aten._native_batch_norm_legit_no_training`` (+ ``aten.relu`` of its output). Where
    the graph also reads its statistics (an eval-mode batch norm in a training graph: frozen
    statistics), they are made as torch makes them (:func:`_inference_statistics`)."""

    name = "bnorm.inference"
    anchors = (aten._native_batch_norm_legit_no_training.default,)
    mode = "infer"

    def match(self, node: torch.fx.Node) -> FusionMatch | Decline | None:
        x, weight, bias, running_mean, running_var, momentum, eps = node.args[:7]
        if any(u.target is not operator.getitem for u in node.users):
            return Decline("the graph reads the inference batch norm's result as a whole")
        spec = self._spec(node, weight, bias, running_mean, running_var, momentum, eps)
        if any(u.args[1] != 0 and u.users for u in node.users):
            spec["statistics_read"] = True
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
    """``aten._native_batch_norm_legit_functional`` with ``training=True``, the ReLU of its y
    and the conversions of its new running statistics to the buffers' dtype where the graph
    has them (:attr:`FusionMatch.applied`: the kernel gives what they did)."""

    name = "bnorm.training"
    anchors = (aten._native_batch_norm_legit_functional.default,)
    mode = "train"

    def match(self, node: torch.fx.Node) -> FusionMatch | Decline | None:
        x, weight, bias, running_mean, running_var, training, momentum, eps = node.args[:8]
        if not training:
            return Decline("a functional batch norm with training=False (BOO runs inference from the "
                           "_no_training op)")
        spec = self._spec(node, weight, bias, running_mean, running_var, momentum, eps)
        inputs = tuple(t for t in (x, weight, bias, running_mean, running_var) if t is not None)
        kept = _buffers_dtype(running_mean, running_var)
        applied = _running_conversions(node, kept)
        if applied:  # the kernel writes the buffers' dtype, which the graph converted to
            spec.update(kernel_running_dtype=kept, running_dtype=kept)
        y = next((u for u in node.users if u.target is operator.getitem and u.args[1] == 0), None)
        last = y
        residual = _residual_sum(node, y)
        if residual is not None:
            add, r = residual
            spec["residual"] = True
            inputs, last = (*inputs, r), add
        relu = only_user(last) if last is not None else None
        if relu is not None and relu.target in _RELU and relu.args == (last,):
            spec["activation"] = "relu"
            applied = (relu, *applied)
        if residual is not None:
            applied = (residual[0], *applied)
        return FusionMatch((node,), inputs, spec, applied)

    def reference(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> Any:
        x, *rest = inputs
        weight = rest.pop(0) if spec["weight"] else None
        bias = rest.pop(0) if spec["bias"] else None
        y, mean, invstd, new_mean, new_var = aten._native_batch_norm_legit_functional(
            x, weight, bias, rest[0], rest[1], True, spec["momentum"], spec["eps"])
        if spec.get("residual"):
            y = y + rest[2]
        running = dtype_from_name(spec["running_dtype"])
        return (torch.relu(y) if spec.get("activation") else y), mean, invstd, new_mean.to(running), \
            new_var.to(running)


def _residual_sum(node: torch.fx.Node, y: torch.fx.Node | None) -> tuple[torch.fx.Node, torch.fx.Node] | None:
    """``(add, r)`` where the batch norm's ``y`` is read only by ``aten.add.Tensor(y, r)`` (or
    ``(r, y)``) with r a tensor of y's shape and dtype made before ``node``; else None."""
    add = only_user(y) if y is not None else None
    if add is None or add.target is not aten.add.Tensor or len(add.args) != 2 or add.kwargs:
        return None
    r = add.args[1] if add.args[0] is y else add.args[0]
    if not isinstance(r, torch.fx.Node) or r is y or not r < node:
        return None
    value, other = tensor_value(y), tensor_value(r)
    if value is None or other is None or (other.shape, other.dtype, other.device) != (value.shape, value.dtype,
                                                                                       value.device):
        return None
    return add, r


def _buffers_dtype(running_mean: torch.fx.Node, running_var: torch.fx.Node) -> str | None:
    """The short name of the running statistics' one dtype, where a kernel can hold them in it."""
    dtypes = {t.meta["val"].dtype for t in (running_mean, running_var)}
    if len(dtypes) != 1 or not dtypes <= set(FLOAT_DTYPES):
        return None
    return short_name(dtypes.pop())


def _running_conversions(node: torch.fx.Node, dtype_name: str | None) -> tuple[torch.fx.Node, ...]:
    """The conversions of a training batch norm's new running mean and variance (its values
    3 and 4) to ``dtype_name``, when the graph converts both; else ()."""
    items = {user.args[1]: user for user in node.users if user.target is operator.getitem}
    conversions = tuple(conversion_of(items[i]) if i in items else None for i in (3, 4))
    if dtype_name is None or any(c is None or short_name(c.meta["val"].dtype) != dtype_name for c in conversions):
        return ()
    return conversions


class BatchNormBackward(FusionPattern):
    """``aten.native_batch_norm_backward`` of a training forward (saved statistics given), with
    the ``aten.threshold_backward(g, y, 0)`` of the ReLU after that forward where it computes
    dy (and nothing else reads it). The match's inputs are in the kernel's order: ``(x, dy,
    weight, save_mean, save_invstd)``, or ``(x, g, weight, save_mean, save_invstd, y)``.

    A residual block's output gradient: where that ReLU's gradient is read after this node
    too (by the block's other branch) and g is ``add(a, b)`` (the block's output feeds the
    next block twice), the kernel takes ``(x, a, weight, save_mean, save_invstd, y, b)``, adds,
    applies the ReLU's gradient and returns it as well (``FusionMatch.exposed``): the sum's
    and the ReLU gradient's kernels leave the graph."""

    name = "bnorm.backward"
    anchors = (aten.native_batch_norm_backward.default,)

    def match(self, node: torch.fx.Node) -> FusionMatch | Decline | None:
        dy, x, weight, _, _, save_mean, save_invstd, train, eps, mask = node.args[:10]
        if not train or save_mean is None or save_invstd is None:
            return Decline("the gradient of an inference batch norm (BOO's backward is the training one's)")
        if weight is None:
            return Decline("a batch norm without weight (BOO's backward takes one)")
        x_value = tensor_value(x)
        if x_value is not None and not gradients_on_boo(x_value):
            return Decline(AUTO_DECLINES_CHANNELS_FIRST)
        spec = {"eps": float(eps), "mask": [bool(m) for m in mask]}
        relu = _relu_gradient(dy, node)
        if relu is not None:
            g, y = relu.args[:2]
            return FusionMatch((relu, node), (x, g, weight, save_mean, save_invstd, y), {**spec, "activation": "relu"})
        summed = _summed_relu_gradient(dy, node)
        if summed is not None:
            add, relu = summed
            (a, b), y = add.args, relu.args[1]
            return FusionMatch((add, relu, node), (x, a, weight, save_mean, save_invstd, y, b),
                               {**spec, "activation": "relu", "residual": True}, exposed=(relu,))
        return FusionMatch((node,), (x, dy, weight, save_mean, save_invstd), spec)

    def _kernel(self, spec: Mapping[str, Any], x: torch.Tensor) -> Launchable:
        return backward_launchable(batch_norm_signature_for(x, True, False, spec["eps"], spec.get("activation")),
                                   x.device, summed=bool(spec.get("residual")))

    def signatures(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> list[BatchNormSignature]:
        return [self._kernel(spec, inputs[0]).signature]

    def _run(self, kernel: Launchable, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor],
             call: Any) -> tuple[torch.Tensor | None, ...] | None:
        x, dy, weight, mean, invstd, *activated = inputs  # then y, then dy2 where the kernel sums
        signature = kernel.signature
        stats = [t.to(signature.stats_dtype) for t in (mean, invstd)]
        layout = memory_format_of(x)
        outputs = call(stored(x, signature), stored(dy.contiguous(memory_format=layout), signature), weight, *stats,
                       *(stored(t.contiguous(memory_format=layout), signature) for t in activated))
        if outputs is None:
            return None
        dx, dw, db, *summed = outputs
        gradients = tuple(t if wanted else None for t, wanted in zip((logical(dx, signature), dw, db), spec["mask"]))
        return gradients + tuple(logical(g, signature) for g in summed)

    def launch(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> tuple[torch.Tensor | None, ...]:
        kernel = self._kernel(spec, inputs[0])
        return self._run(kernel, spec, inputs, kernel)

    def bind(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> BoundLaunch:
        kernel = self._kernel(spec, inputs[0])
        general = lambda *tensors: self._run(kernel, spec, tensors, kernel.try_call)  # noqa: E731
        if not all(spec["mask"]):  # the graph wants Nones where the kernel gives gradients
            return general
        signature = kernel.signature
        to_stored = lambda t: stored(t, signature)  # noqa: E731
        to_logical = lambda t: logical(t, signature)  # noqa: E731
        views = (to_stored, to_stored, None, None, None, to_stored, to_stored)[:len(inputs)]
        direct = kernel.bind(inputs, views, (to_logical, None, None, to_logical)[:len(signature.output_specs())])
        return general if direct is None else direct.or_else(general)

    def reference(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> tuple[torch.Tensor | None, ...]:
        x, dy, weight, mean, invstd, *activated = inputs
        if spec.get("residual"):
            dy = dy + activated[1]
        if activated:
            dy = aten.threshold_backward(dy, activated[0], 0)
        gradients = aten.native_batch_norm_backward(dy, x, weight, None, None, mean, invstd, True, spec["eps"],
                                                    spec["mask"])
        return (*gradients, dy) if spec.get("residual") else gradients


def _summed_relu_gradient(dy: Any, node: torch.fx.Node) -> tuple[torch.fx.Node, torch.fx.Node] | None:
    """``(add, dy)`` where ``dy`` is ``aten.threshold_backward(add(a, b), y, 0)`` that ``node``
    reads first (others may after it: the kernel gives them dy), the add read by dy alone, a,
    b and y of x's shape and dtype; else None."""
    if not _is_relu_gradient(dy) or read_before(node, dy.users):
        return None
    add = dy.args[0]
    if not isinstance(add, torch.fx.Node) or add.target is not aten.add.Tensor or only_user(add) is not dy \
            or len(add.args) != 2 or add.kwargs or not _like_x(node, (*add.args, dy.args[1])):
        return None
    return add, dy


def _relu_gradient(dy: Any, node: torch.fx.Node) -> torch.fx.Node | None:
    """``dy`` when it is ``aten.threshold_backward(g, y, 0)`` (a ReLU's gradient) that only
    ``node`` reads, with g and y of x's shape and dtype; else None."""
    if not _is_relu_gradient(dy) or only_user(dy) is not node or not _like_x(node, dy.args[:2]):
        return None
    return dy


def _is_relu_gradient(dy: Any) -> bool:
    """Whether ``dy`` is a node ``aten.threshold_backward(g, y, 0)``: a ReLU's gradient."""
    return isinstance(dy, torch.fx.Node) and dy.target is aten.threshold_backward.default and len(dy.args) == 3 \
        and dy.args[2] == 0 and not dy.kwargs


def _like_x(node: torch.fx.Node, args: Sequence[Any]) -> bool:
    """Whether every one of ``args`` is a node whose value has the shape and dtype of the
    input x of the batch-norm backward ``node``."""
    x = node.args[1].meta.get("val")
    values = [t.meta.get("val") if isinstance(t, torch.fx.Node) else None for t in args]
    return all(isinstance(v, torch.Tensor) and v.shape == x.shape and v.dtype == x.dtype for v in values)


PATTERNS: tuple[FusionPattern, ...] = (BatchNormInference(), BatchNormTraining(), BatchNormBackward())
