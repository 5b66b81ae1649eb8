"""How much arithmetic a graph's convolution, matmul, attention and normalization nodes do.

The offload summary weighs what ran on BOO kernels by these counts, so that "90% offloaded"
means 90% of the work, not of the nodes. Convolutions, matmuls and attention are counted
with torch's own formulas (``torch.utils.flop_counter``: 2 per multiply-add, gradients
included), except a grouped convolution's gradients, which torch counts as if ungrouped (a
96-channel depthwise 7x7's 97 times over, torch 2.11 to 2.13): each gradient is counted as its
forward; normalizations, which torch does not count, at a few operations per element.
Every other op counts zero: it is memory traffic, not arithmetic.
"""

from __future__ import annotations

import math

import torch
import torch.fx
from torch.utils._pytree import tree_map

aten = torch.ops.aten

#: Operations per element of the input of normalization ops (mean, variance, normalize,
#: scale and shift; about twice that for the gradients).
NORMALIZATION_FLOPS_PER_ELEMENT = {
    aten.native_layer_norm.default: 7,
    aten.native_layer_norm_backward.default: 12,
    aten.native_batch_norm.default: 7,
    aten._native_batch_norm_legit.default: 7,
    aten._native_batch_norm_legit_functional.default: 7,
    aten._native_batch_norm_legit_no_training.default: 4,
    aten.native_batch_norm_backward.default: 12,
    aten.native_group_norm.default: 7,
    aten.native_group_norm_backward.default: 12,
}


def node_flops(node: torch.fx.Node) -> int:
    """The floating-point operations of one ``call_function`` node (0 for ops not counted,
    and for nodes without compile-time metadata)."""
    target = node.target
    per_element = NORMALIZATION_FLOPS_PER_ELEMENT.get(target)
    if per_element is not None:
        return per_element * _numel(_value(node.args[0]) if node.args else None)
    formula = _formula(target)
    if formula is None:
        return 0
    args, kwargs = tree_map(_value, (node.args, node.kwargs))
    try:
        if target is aten.convolution_backward.default and args[9] != 1:
            return _grouped_convolution_backward(*args)
        return int(formula(*args, out_val=node.meta.get("val"), **kwargs))
    except Exception:  # a formula that cannot read these arguments (symbolic shapes): not counted
        return 0


def _grouped_convolution_backward(grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                                  _bias_sizes: object, _stride: object, _padding: object, _dilation: object,
                                  transposed: bool, _output_padding: object, _groups: int,
                                  output_mask: list[bool]) -> int:
    """The data and weight gradients a grouped ``convolution_backward`` computes, each counted
    as the forward's multiply-adds (the weight's shape holds the channels per group)."""
    from torch.utils.flop_counter import conv_flop_count

    forward = conv_flop_count(list(x.shape), list(weight.shape), list(grad_out.shape), transposed)
    return int(forward * (bool(output_mask[0]) + bool(output_mask[1])))


def _formula(target: object):
    from torch.utils.flop_counter import flop_registry

    packet = getattr(target, "overloadpacket", None)
    return flop_registry.get(packet) if packet is not None else None


def _value(item: object) -> object:
    return item.meta.get("val") if isinstance(item, torch.fx.Node) else item


def _numel(value: object) -> int:
    if not isinstance(value, torch.Tensor):
        return 0
    try:
        return math.prod(int(d) for d in value.shape)
    except TypeError:  # symbolic
        return 0
