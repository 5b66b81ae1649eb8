"""The offload summary's FLOP counts: a convolution's gradients are counted as the forward's
multiply-adds each, grouped or not (torch's own formula counts a grouped one as ungrouped)."""

from __future__ import annotations

import operator

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from boo_core.dynamo.flops import node_flops

aten = torch.ops.aten


def counts(fn, *args) -> list[int]:
    graph = make_fx(fn, tracing_mode="fake")(*args).graph
    return [node_flops(n) for n in graph.nodes if n.op == "call_function" and n.target is not operator.getitem]


@pytest.mark.parametrize(("channels", "groups", "window"), [(96, 96, 7), (64, 32, 3), (16, 1, 3)])
@pytest.mark.parametrize("mask", [(True, True), (True, False), (False, True)])
def test_each_gradient_of_a_convolution_counts_as_its_forward(channels, groups, window, mask):
    x = torch.empty(2, channels, 20, 20)
    w = torch.empty(channels, channels // groups, window, window)
    conv = (w.shape[0:1], [1, 1], [window // 2] * 2, [1, 1], False, [0, 0], groups)
    [forward] = counts(lambda x, w: aten.convolution(x, w, None, *conv[1:]), x, w)
    assert forward == 2 * 2 * 20 * 20 * channels * (channels // groups) * window * window
    grad_out = torch.empty(2, channels, 20, 20)
    [backward] = counts(lambda g, x, w: aten.convolution_backward(g, x, w, *conv, [*mask, False]), grad_out, x, w)
    assert backward == forward * sum(mask)


def test_attention_on_the_cpu_counts_as_on_the_gpu():
    """torch's registry has no formula for the CPU's flash attention: without one, a
    transformer's attention would count nothing, and its share of a step stay unseen."""
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    q, k, v = torch.empty(2, 4, 17, 8), torch.empty(2, 4, 17, 8), torch.empty(2, 4, 17, 8)
    [forward] = counts(lambda q, k, v: aten._scaled_dot_product_flash_attention_for_cpu(q, k, v), q, k, v)
    assert forward == sdpa_flop_count(q.shape, k.shape, v.shape) > 0
    out, lse = torch.empty(2, 4, 17, 8), torch.empty(2, 4, 17)
    [backward] = counts(lambda g, q, k, v, o, s: aten._scaled_dot_product_flash_attention_for_cpu_backward(
        g, q, k, v, o, s, 0.0, False), out, q, k, v, out, lse)
    assert backward == sdpa_backward_flop_count(out.shape, q.shape, k.shape, v.shape) > 0


def test_the_transformer_layers_fused_inference_op_counts_its_products():
    """``nn.TransformerEncoderLayer``'s fast path (eval, no grad) is one op BOO does not take:
    counted, it shows in the offload summary as work left to the nested backend."""
    from boo_core.dynamo import offload_summary, reset_offload_summary

    layer = torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, dropout=0.0,
                                             batch_first=True).eval()
    x = torch.randn(2, 16, 64)
    tokens, attention = 2 * 16, 4 * 2 * 16 * 16 * 64
    want = 2 * tokens * (3 * 64 * 64 + 64 * 64 + 2 * 64 * 128) + attention
    torch._dynamo.reset()
    reset_offload_summary()
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(layer, backend="iree_boo", dynamic=False)(x), layer(x))
    summary = offload_summary()
    assert dict(summary.nested_flops) == {"aten._transformer_encoder_layer_fwd": want}
    assert summary.offload_share == 0.0
    torch._dynamo.reset()


def test_multi_head_attentions_fused_inference_op_counts_its_products():
    q, kv = torch.empty(2, 5, 32), torch.empty(2, 7, 32)
    weights = (torch.empty(96, 32), torch.empty(96), torch.empty(32, 32), torch.empty(32))
    [flops] = counts(lambda q, kv, *w: aten._native_multi_head_attention(q, kv, kv, 32, 4, *w, need_weights=False),
                     q, kv, *weights)
    assert flops == 2 * (2 * 5 * 32 * 32 + 2 * 2 * 7 * 32 * 32) + 2 * 2 * 5 * 32 * 32 + 4 * 2 * 5 * 7 * 32
