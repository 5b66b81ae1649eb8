"""Sums of selections' gradients that fill a tensor become one stack (boo_core.dynamo.gradient_sums)."""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

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


# Attention's packed gradient under iree_boo, stacked and trained like eager: tests/boo_core/test_copy_chains.py
