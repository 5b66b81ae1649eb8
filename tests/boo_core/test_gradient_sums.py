"""Sums of selections' gradients that fill a tensor become one stack (boo_core.dynamo.gradient_sums)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx

from boo_core.dynamo import offload_summary, reset_offload_summary
from boo_core.dynamo.gradient_sums import stack_selection_gradients

aten = torch.ops.aten
SHAPE = [3, 4, 5]


def _traced(fn, *shapes):
    return make_fx(fn, tracing_mode="fake")(*(torch.empty(s) for s in shapes))


def _targets(gm: torch.fx.GraphModule) -> list:
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def _same_values(fn, gm: torch.fx.GraphModule, *shapes) -> None:
    inputs = [torch.randn(s) for s in shapes]
    torch.testing.assert_close(gm(*inputs), fn(*inputs), rtol=0, atol=0)


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 1, 0), (1, -1, 0)], ids=["in order", "reversed", "negative"])
def test_a_sum_that_fills_the_tensor_is_one_stack(order):
    def fn(a, b, c):
        parts = [aten.select_backward(g, SHAPE, 0, i) for g, i in zip((a, b, c), order)]
        return parts[0] + (parts[1] + parts[2])

    gm = _traced(fn, [4, 5], [4, 5], [4, 5])
    assert stack_selection_gradients(gm.graph) == 1
    gm.recompile()
    assert aten.stack.default in _targets(gm)
    assert aten.select_backward.default not in _targets(gm) and aten.add.Tensor not in _targets(gm)
    _same_values(fn, gm, [4, 5], [4, 5], [4, 5])


def test_an_inner_dim_is_stacked_there():
    def fn(a, b):
        return aten.select_backward(a, [2, 3, 6], 1, 1) + aten.select_backward(b, [2, 3, 6], 1, 0) + \
            aten.select_backward(b, [2, 3, 6], 1, 2)

    gm = _traced(fn, [2, 6], [2, 6])
    assert stack_selection_gradients(gm.graph) == 1
    gm.recompile()
    _same_values(fn, gm, [2, 6], [2, 6])


def _partial(a, b, c):
    return aten.select_backward(a, SHAPE, 0, 0) + aten.select_backward(b, SHAPE, 0, 2)


def _repeated(a, b, c):
    return aten.select_backward(a, SHAPE, 0, 0) + aten.select_backward(b, SHAPE, 0, 0) + \
        aten.select_backward(c, SHAPE, 0, 2)


def _part_read_elsewhere(a, b, c):
    first = aten.select_backward(a, SHAPE, 0, 0) + aten.select_backward(b, SHAPE, 0, 1)
    return first + aten.select_backward(c, SHAPE, 0, 2), first


def _scaled(a, b, c):
    return torch.add(aten.select_backward(a, SHAPE, 0, 0) + aten.select_backward(b, SHAPE, 0, 1),
                     aten.select_backward(c, SHAPE, 0, 2), alpha=2)


def _something_else_added(a, b, c):
    parts = aten.select_backward(a, SHAPE, 0, 0) + aten.select_backward(b, SHAPE, 0, 1) + \
        aten.select_backward(c, SHAPE, 0, 2)
    return parts + torch.ones(SHAPE)


@pytest.mark.parametrize("fn", [_partial, _repeated, _part_read_elsewhere, _scaled],
                         ids=["an index missing", "an index twice", "a part read elsewhere", "alpha"])
def test_sums_that_are_not_a_stack_stay(fn):
    gm = _traced(fn, [4, 5], [4, 5], [4, 5])
    before = _targets(gm)
    assert stack_selection_gradients(gm.graph) == 0
    assert _targets(gm) == before


def test_the_stack_stops_where_something_else_is_added():
    gm = _traced(_something_else_added, [4, 5], [4, 5], [4, 5])
    assert stack_selection_gradients(gm.graph) == 1  # the three selections' sum, the add after it kept
    gm.recompile()
    assert aten.add.Tensor in _targets(gm)
    _same_values(_something_else_added, gm, [4, 5], [4, 5], [4, 5])


def test_attentions_packed_gradient_is_one_stack_and_trains_like_eager():
    """nn.MultiheadAttention (batch first) splits its packed projection by selection: under
    iree_boo its backward stacks the three gradients, and gradients match eager."""
    torch.manual_seed(0)
    attention = nn.MultiheadAttention(16, 2, batch_first=True)
    reference = copy.deepcopy(attention)
    torch._dynamo.reset()
    reset_offload_summary()
    compiled = torch.compile(lambda t: attention(t, t, t, need_weights=False)[0], backend="iree_boo", dynamic=False)
    x = torch.randn(3, 5, 16, requires_grad=True)
    compiled(x).square().sum().backward()
    x_grad, x.grad = x.grad, None
    reference(x, x, x, need_weights=False)[0].square().sum().backward()
    torch.testing.assert_close(x_grad, x.grad, rtol=1e-5, atol=1e-5)
    for got, want in zip(attention.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-5, atol=1e-5)
    backward = [g for g in offload_summary().graphs if g.kind == "backward"]
    assert [g.stacked_gradients for g in backward] == [1], backward
    assert not backward[0].fallbacks["aten.select_backward"], backward[0].fallbacks
