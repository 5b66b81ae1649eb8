"""Copies that only reorder are skipped (boo_core.dynamo.reorders): matmuls read rows in the
order memory holds them, attention reads strided views; the values stay eager's, a source
laid out otherwise than traced is copied the old way, and returned values keep their layout."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.backends.common import aot_autograd

from boo_core.dynamo import reorders
from boo_core.dynamo.copies import drop_noop_clones
from boo_core.dynamo.reorders import Restrided, skip_reordering_copies
from boo_core.testing.models import AttentionBlock

aten = torch.ops.aten


def _compiled_graphs(fn, *args) -> tuple[list[torch.fx.GraphModule], list[int], object]:
    """``fn(*args)`` through an eager backend that runs the pass on each inference graph, then
    drops the clones left copying nothing (as BOO's rewrite does): the graphs, what the pass
    returned, and (the clones each graph had before, the result)."""
    before, counts = [], []

    def compiler(gm: torch.fx.GraphModule, _):
        before.append(len(gm.graph.find_nodes(op="call_function", target=aten.clone.default)))
        counts.append(skip_reordering_copies(gm))
        drop_noop_clones(gm.graph)
        gm.recompile()
        graphs.append(gm)
        return gm.forward

    graphs: list[torch.fx.GraphModule] = []
    torch._dynamo.reset()
    with torch.no_grad():
        result = torch.compile(fn, backend=aot_autograd(fw_compiler=compiler), dynamic=False)(*args)
    torch._dynamo.reset()
    return graphs, counts, (before, result)


def _clones(gm: torch.fx.GraphModule) -> int:
    return len(gm.graph.find_nodes(op="call_function", target=aten.clone.default))


def _restrided(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if isinstance(n.target, Restrided)]


@pytest.mark.parametrize("batch, tokens, width, heads", [(2, 17, 32, 4), (3, 5, 48, 2)])
def test_batch_first_attention_makes_no_copy_and_computes_what_eager_does(batch, tokens, width, heads):
    torch.manual_seed(batch)
    block = AttentionBlock(width, heads).eval()
    x = torch.randn(batch, tokens, width)
    fallbacks = reorders.fallbacks
    graphs, counts, (clones_before, got) = _compiled_graphs(block, x)
    with torch.no_grad():
        torch.testing.assert_close(got, block(x), rtol=1e-5, atol=1e-5)
    # AOTAutograd's graph copies the input to sequence-first rows, the packed projection to
    # (3, L, N, E), and the output projection back to batch-first: none of the three is made.
    assert clones_before == [3] and counts == [3]
    assert _clones(graphs[0]) == 0
    assert not graphs[0].graph.find_nodes(op="call_function", target=aten.reshape.default)
    assert reorders.fallbacks == fallbacks  # every new view met the layout it was traced with


def test_every_new_view_computes_the_old_values_from_a_source_laid_out_otherwise():
    """A source with another layout than traced (a kernel's output laid out otherwise) takes
    the fallback, which gives what the view gives on the traced layout."""
    torch.manual_seed(0)
    graphs, _, _ = _compiled_graphs(AttentionBlock(32, 4).eval(), torch.randn(2, 17, 32))
    nodes = _restrided(graphs[0])
    # the input projection's rows and product, q, k and v, the output projection's rows and product
    assert len(nodes) == 7
    for node in nodes:
        restrided: Restrided = node.target
        shape, strides, offset = restrided.traced
        logical = torch.randn(shape)
        other = logical.contiguous() if (logical.stride(), 0) != (strides, offset) else logical.mT.contiguous().mT
        before = reorders.fallbacks
        torch.testing.assert_close(restrided(other), restrided(_laid_out(logical, strides, offset)), rtol=0, atol=0)
        assert reorders.fallbacks == before + 1, node


def _laid_out(logical: torch.Tensor, strides: tuple[int, ...], offset: int) -> torch.Tensor:
    """``logical``'s values in a tensor of the given strides and storage offset."""
    span = offset + sum((n - 1) * s for n, s in zip(logical.shape, strides)) + 1
    laid_out = torch.full((span,), float("nan")).as_strided(logical.shape, strides, offset)
    laid_out.copy_(logical)
    return laid_out


def _rows_then_product(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Sequence-first rows of a batch-first tensor through a linear layer, back to batch-first
    (reduced: a value returned keeps its layout, which the tanh's would not)."""
    n, length, k = x.shape
    rows = x.transpose(0, 1).contiguous().view(length * n, k)
    y = (rows @ w.t()).view(length, n, -1) + b
    return torch.tanh(y.transpose(0, 1)).sum(-1)


def test_a_product_reads_rows_in_storage_order_and_views_its_result_back():
    torch.manual_seed(1)
    x, w, b = torch.randn(3, 7, 16), torch.randn(24, 16), torch.randn(24)
    graphs, counts, (_, got) = _compiled_graphs(_rows_then_product, x, w, b)
    torch.testing.assert_close(got, _rows_then_product(x, w, b), rtol=1e-5, atol=1e-5)
    assert counts == [1] and _clones(graphs[0]) == 0
    product = graphs[0].graph.find_nodes(op="call_function", target=aten.mm.default)[0]
    assert isinstance(product.args[0].target, Restrided)
    assert product.args[0].meta["val"].is_contiguous()  # the rows as memory holds them


def test_a_product_with_a_full_addend_keeps_its_copy():
    """``beta * C + a @ b`` with C of the product's shape: reordering a's rows would need C's
    reordered too."""
    def f(x, w, c):
        n, length, k = x.shape
        return torch.addmm(c, x.transpose(0, 1).contiguous().view(length * n, k), w).view(length, n, -1).sin()

    x, w, c = torch.randn(3, 5, 8), torch.randn(8, 6), torch.randn(15, 6)
    graphs, counts, (_, got) = _compiled_graphs(f, x, w, c)
    torch.testing.assert_close(got, f(x, w, c))
    assert counts == [0] and _clones(graphs[0]) == 1


def test_a_copy_read_by_anything_but_attention_stays():
    def f(q, k, v):
        q = q.transpose(1, 2).contiguous()
        return torch.nn.functional.scaled_dot_product_attention(q, k, v) + q.sum()

    q, k, v = torch.randn(2, 5, 3, 8), torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 8)
    graphs, counts, (_, got) = _compiled_graphs(f, q, k, v)
    torch.testing.assert_close(got, f(q, k, v))
    assert counts == [0] and _clones(graphs[0]) == 1


def test_a_returned_value_keeps_its_layout_or_nothing_changes():
    """Skipping the copy would return the product in another layout than traced (AOTAutograd
    and a backward graph rely on it): the graph is left as it was."""
    def f(x, w):
        n, length, k = x.shape
        y = (x.transpose(0, 1).contiguous().view(length * n, k) @ w).view(length, n, -1)
        return y * 2

    x, w = torch.randn(3, 5, 8), torch.randn(8, 6)
    graphs, counts, (_, got) = _compiled_graphs(f, x, w)
    torch.testing.assert_close(got, f(x, w))
    assert counts == [0] and _clones(graphs[0]) == 1
    assert not _restrided(graphs[0])


def test_attention_keeps_its_copy_where_the_views_strides_would_be_misaligned():
    """Heads of 4 elements: q, k and v as views of the packed projection would step 4
    elements between heads, which the fused kernels need in multiples of 8 (16 bytes)."""
    torch.manual_seed(2)
    block = AttentionBlock(12, 3).eval()
    x = torch.randn(2, 5, 12)
    graphs, counts, (clones_before, got) = _compiled_graphs(block, x)
    with torch.no_grad():
        torch.testing.assert_close(got, block(x), rtol=1e-5, atol=1e-5)
    attention = next(n for n in graphs[0].graph.nodes if n.target in reorders._ATTENTION)
    assert not any(isinstance(a.target, Restrided) for a in attention.args[:3])  # q, k, v: the copy's views
    assert _clones(graphs[0]) >= 1 and counts[0] < clones_before[0]
