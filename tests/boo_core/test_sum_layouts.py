"""Residual sums made in their contiguous operand's layout (boo_core.dynamo.sum_layouts)."""

from __future__ import annotations

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from boo_core.dynamo.sum_layouts import keep_sums_contiguous

aten = torch.ops.aten


def _normed_sum(attention: torch.Tensor, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """A batch-first block's residual sum: attention's sequence-first result viewed batch
    first, plus the batch-first input, layer-normed, summed again with a product of that,
    and layer-normed again."""
    stream = attention.transpose(0, 1) + x
    y = aten.native_layer_norm(stream, [8], weight, None, 1e-5)[0]
    return aten.native_layer_norm(stream + y * 2, [8], weight, None, 1e-5)[0]


def _inputs() -> list[torch.Tensor]:
    return [torch.randn(5, 3, 8), torch.randn(3, 5, 8), torch.randn(8)]


def _adds(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.target is aten.add.Tensor]


def test_a_sum_takes_its_contiguous_operands_layout_and_computes_the_same_values():
    gm = make_fx(_normed_sum, tracing_mode="fake")(*_inputs())
    first = _adds(gm)[0]
    assert not first.meta["val"].is_contiguous()  # traced in attention's sequence-first order
    assert keep_sums_contiguous(gm.graph) == 1
    gm.recompile()
    first, second = _adds(gm)
    assert first.args[0].op == "placeholder" and first.meta["val"].is_contiguous()
    assert second.meta["val"].is_contiguous()  # it takes the first sum first: its layout too
    norm = next(n for n in gm.graph.nodes if n.target is aten.native_layer_norm.default)
    assert norm.args[0].meta["val"].is_contiguous()
    fresh = _inputs()
    torch.testing.assert_close(gm(*fresh), _normed_sum(*fresh), rtol=0, atol=0)


def _returned_sum(attention: torch.Tensor, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return attention.transpose(0, 1) + x


def _viewed_sum(attention: torch.Tensor, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return (attention.transpose(0, 1) + x).transpose(0, 1) * weight


def test_a_sum_the_graph_returns_or_views_keeps_its_layout():
    for f in (_returned_sum, _viewed_sum):
        gm = make_fx(f, tracing_mode="fake")(*_inputs())
        add = _adds(gm)[0]
        args, stride = add.args, add.meta["val"].stride()
        assert keep_sums_contiguous(gm.graph) == 0, f.__name__
        assert add.args == args and add.meta["val"].stride() == stride, f.__name__


def test_a_sum_of_symbolic_shape_keeps_its_layout():
    gm = make_fx(_normed_sum, tracing_mode="symbolic")(*_inputs())
    add = _adds(gm)[0]
    args = add.args
    assert keep_sums_contiguous(gm.graph) == 0
    assert add.args == args
