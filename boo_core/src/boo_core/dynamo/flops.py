"""How much arithmetic a graph's convolution, matmul, attention and normalization nodes do.

The offload summary weighs what ran on BOO kernels by these counts, so that "90% offloaded"
means 90% of the work, not of the nodes. Convolutions, matmuls and attention are counted
with torch's own formulas (``torch.utils.flop_counter``: 2 per multiply-add, gradients
included; the CPU's attention, which torch leaves out, with its GPU kernels' formulas),
except a grouped convolution's gradients, which torch counts as if ungrouped (a
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


def _cpu_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *_: object, **__: object) -> int:
    from torch.utils.flop_counter import sdpa_flop_count

    return sdpa_flop_count(query.shape, key.shape, value.shape)


def _cpu_attention_backward(grad_out: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            *_: object, **__: object) -> int:
    from torch.utils.flop_counter import sdpa_backward_flop_count

    return sdpa_backward_flop_count(grad_out.shape, query.shape, key.shape, value.shape)


def _attention_products(batch: int, queries: int, keys: int, width: int) -> int:
    """Q Kᵀ and its product with V: 2 per multiply-add."""
    return 4 * batch * queries * keys * width


def _fast_path_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, embed_dim: int,
                         _heads: int, _qkv_weight: object, _qkv_bias: object, proj_weight: torch.Tensor,
                         *_: object, **__: object) -> int:
    """``nn.MultiheadAttention``'s fused inference op (batch first): the projections of the
    queries, keys and values, attention, the output's projection."""
    batch, queries, keys = query.shape[0], query.shape[1], key.shape[1]
    width = embed_dim * embed_dim
    projections = 2 * (batch * queries * width + 2 * batch * keys * width) + 2 * batch * queries * proj_weight.numel()
    return projections + _attention_products(batch, queries, keys, embed_dim)


def _fast_path_encoder_layer(src: torch.Tensor, embed_dim: int, _heads: int, qkv_weight: torch.Tensor,
                             _qkv_bias: object, proj_weight: torch.Tensor, *args: object, **__: object) -> int:
    """``nn.TransformerEncoderLayer``'s fused inference op (batch first): its attention's
    four products and the feed-forward's two."""
    ffn_1, ffn_2 = args[8], args[10]
    batch, tokens = src.shape[0], src.shape[1]
    weights = qkv_weight.numel() + proj_weight.numel() + ffn_1.numel() + ffn_2.numel()
    return 2 * batch * tokens * weights + _attention_products(batch, tokens, tokens, embed_dim)


#: Ops torch's registry does not count (torch 2.11 to 2.13): the CPU's attention (the
#: formulas of the GPU's kernels, the same products), and the fused inference ops of
#: ``nn.MultiheadAttention`` and ``nn.TransformerEncoderLayer`` (their "fast path"), so
#: that a graph of them shows as work left to the nested backend, not as no work at all.
_MISSING_FORMULAS = {
    aten._scaled_dot_product_flash_attention_for_cpu: _cpu_attention,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_attention_backward,
    aten._native_multi_head_attention: _fast_path_attention,
    aten._transformer_encoder_layer_fwd: _fast_path_encoder_layer,
}


def _formula(target: object):
    from torch.utils.flop_counter import flop_registry

    packet = getattr(target, "overloadpacket", None)
    if packet is None:
        return None
    return flop_registry.get(packet) or _MISSING_FORMULAS.get(packet)


def _value(item: object) -> object:
    return item.meta.get("val") if isinstance(item, torch.fx.Node) else item


def _numel(value: object) -> int:
    if not isinstance(value, torch.Tensor):
        return 0
    try:
        return math.prod(int(d) for d in value.shape)
    except TypeError:  # symbolic
        return 0
