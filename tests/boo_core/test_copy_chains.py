"""Chains of copies made one copy (boo_core.dynamo.copy_chains)."""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx

from boo_core.dynamo import copy_chains, offload_summary, reset_offload_summary
from boo_core.dynamo.copy_chains import Gathered, collapse_copy_chains

aten = torch.ops.aten


def _gradient_chain(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Two head-split gradients (batch, heads, sequence, dim) laid out (batch, sequence, heads,
    dim), each copied, transposed and copied again, stacked, then copied into (sequence,
    batch, 2, width): the shape of attention's packed gradient in a backward graph."""
    parts = []
    for g in (a, b):
        g = g.clone(memory_format=torch.contiguous_format).view(6, 5, 8)  # (batch * heads, sequence, dim)
        parts.append(g.transpose(0, 1).clone(memory_format=torch.contiguous_format).view(5, 2, 24))
    return torch.stack(parts).unsqueeze(3).transpose(0, 3).squeeze(0).clone(memory_format=torch.contiguous_format)


def _sources() -> list[torch.Tensor]:
    """(2, 3, 5, 8) tensors stored (2, 5, 3, 8): as attention's backward returns dq and dk."""
    return [torch.randn(2, 5, 3, 8).transpose(1, 2) for _ in range(2)]


def test_a_chain_of_copies_is_one_stack_of_views():
    sources = _sources()
    gm = make_fx(_gradient_chain, tracing_mode="fake")(*sources)
    copies = sum(n.target in (aten.clone.default, aten.stack.default) for n in gm.graph.nodes)
    assert copies == 6
    assert collapse_copy_chains(gm.graph) == 5
    gm.recompile()
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert len(targets) == 1 and isinstance(targets[0], Gathered) and targets[0].dim is not None
    fresh = _sources()
    got = gm(*fresh)
    torch.testing.assert_close(got, _gradient_chain(*fresh), rtol=0, atol=0)
    assert got.is_contiguous()


def test_a_source_laid_out_otherwise_at_run_time_takes_the_graphs_copies():
    gm = make_fx(_gradient_chain, tracing_mode="fake")(*_sources())
    assert collapse_copy_chains(gm.graph) == 5
    gm.recompile()
    before = copy_chains.fallbacks
    dense = [torch.randn(2, 3, 5, 8) for _ in range(2)]  # contiguous: not the traced layout
    torch.testing.assert_close(gm(*dense), _gradient_chain(*dense), rtol=0, atol=0)
    assert copy_chains.fallbacks == before + 1


def _read_twice(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    inner = a.clone(memory_format=torch.contiguous_format).view(6, 5, 8)
    return inner.transpose(0, 1).clone(memory_format=torch.contiguous_format), inner


def _one_copy(a: torch.Tensor) -> torch.Tensor:
    return a.transpose(0, 1).clone(memory_format=torch.contiguous_format)


def test_chains_with_a_value_read_elsewhere_or_a_single_copy_stay():
    for fn in (_read_twice, _one_copy):
        gm = make_fx(fn, tracing_mode="fake")(_sources()[0])
        before = [n.target for n in gm.graph.nodes]
        assert collapse_copy_chains(gm.graph) == 0
        assert [n.target for n in gm.graph.nodes] == before


def test_attentions_backward_copies_collapse_and_train_like_eager():
    """nn.MultiheadAttention (batch first) under iree_boo: its backward graph sums three
    selections' gradients into the packed projection's gradient (made one stack,
    boo_core.dynamo.gradient_sums) and moves dq, dk and dv there through chains of copies
    (made one copy); gradients match eager."""
    torch.manual_seed(0)
    attention = nn.MultiheadAttention(16, 2, batch_first=True)
    reference = copy.deepcopy(attention)
    torch._dynamo.reset()
    reset_offload_summary()
    compiled = torch.compile(lambda t: attention(t, t, t, need_weights=False)[0], backend="iree_boo", dynamic=False)
    for _ in range(2):
        x = torch.randn(3, 5, 16, requires_grad=True)
        compiled(x).square().sum().backward()
        x_grad, x.grad = x.grad, None
        reference(x, x, x, need_weights=False)[0].square().sum().backward()
        torch.testing.assert_close(x_grad, x.grad, rtol=1e-5, atol=1e-5)
        for got, want in zip(attention.parameters(), reference.parameters(), strict=True):
            torch.testing.assert_close(got.grad, want.grad, rtol=1e-5, atol=1e-5)
            got.grad = want.grad = None
    [backward] = [g for g in offload_summary().graphs if g.kind == "backward"]
    assert backward.stacked_gradients == 1 and backward.collapsed_copies >= 4, backward
    assert not backward.fallbacks["aten.select_backward"], backward.fallbacks
