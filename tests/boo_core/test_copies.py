"""Clones that copy nothing are dropped from compiled graphs (boo_core.dynamo.copies), and
only where no one can tell: never a graph input aliased by an output, never a tensor some
node writes into, never a copy into another layout."""

from __future__ import annotations

import copy

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from boo_core.dynamo import offload_summary, reset_offload_summary
from boo_core.dynamo.copies import batch_final_writes, drop_noop_clones, update_in_place

aten = torch.ops.aten


def clones(graph: torch.fx.Graph) -> int:
    return len(graph.find_nodes(op="call_function", target=aten.clone.default))


def test_an_inference_dropout_copies_nothing_under_torch_compile():
    model = torch.nn.Sequential(torch.nn.Tanh(), torch.nn.Dropout(0.5), torch.nn.Sigmoid()).eval()
    x = torch.randn(4, 8)
    torch._dynamo.reset()
    reset_offload_summary()
    with torch.no_grad():
        got = torch.compile(model, backend="iree_boo", dynamic=False)(x)
    torch.testing.assert_close(got, torch.sigmoid(torch.tanh(x)))
    assert [g.dropped_copies for g in offload_summary().graphs] == [1]


def test_a_clone_is_kept_where_dropping_it_would_show():
    def f(x):
        y = x * 2
        kept_for_output = y.clone()  # returned: another output (y) must not alias it
        into_channels_last = (y + 1).clone(memory_format=torch.channels_last)
        written = (y - 1).clone()
        written.add_(1)  # written in place: its source must stay its own tensor
        return kept_for_output, y, into_channels_last, written, x.clone()  # the last: a clone of an input

    graph = make_fx(f, tracing_mode="fake")(torch.randn(2, 3, 4, 4)).graph
    assert clones(graph) == 4
    assert drop_noop_clones(graph) == 0 and clones(graph) == 4


def test_a_graph_that_writes_in_place_anywhere_keeps_its_clones():
    def f(x, stats):
        y = torch.tanh(x).clone()  # a copy of its own... in a graph that also writes into an input
        stats.copy_(y.mean(0))
        return torch.sigmoid(y)

    graph = make_fx(f, tracing_mode="fake")(torch.randn(3, 5), torch.zeros(5)).graph
    assert drop_noop_clones(graph) == 0 and clones(graph) == 1


def test_a_clone_inside_the_graph_is_replaced_by_its_source():
    def f(x):
        y = torch.tanh(x).clone()
        return torch.sigmoid(y) + y

    module = make_fx(f, tracing_mode="fake")(torch.randn(3, 5))
    assert drop_noop_clones(module.graph) == 1 and clones(module.graph) == 0
    module.recompile()
    x = torch.randn(3, 5)
    torch.testing.assert_close(module(x), f(x))


def test_a_batch_norms_step_counter_is_counted_in_place():
    """A training forward's ``copy_(count, add(count, 1))`` into the buffer is one ``add_``
    under iree_boo; the counters (and the running statistics beside them) move as eager's."""
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.BatchNorm2d(4)).train()
    reference = copy.deepcopy(model)
    x = torch.randn(2, 3, 6, 6)
    torch._dynamo.reset()
    reset_offload_summary()
    compiled = torch.compile(model, backend="iree_boo", dynamic=False)
    for _ in range(3):
        torch.testing.assert_close(compiled(x), reference(x))
    forwards = [g for g in offload_summary().graphs if g.kind == "forward"]
    assert [(g.updates_in_place, g.batched_writes) for g in forwards] == [(2, 4)]  # the means and variances
    for (name, got), want in zip(model.named_buffers(), reference.buffers()):
        torch.testing.assert_close(got, want, msg=name)


def test_only_an_update_read_by_its_copy_alone_and_laid_out_as_its_input_is_made_in_place():
    def f(count, other, wide):
        count.copy_(count + 1)  # in place
        read = other + 1
        other.copy_(read)  # its update is read again: kept
        wide.copy_(wide * 2)  # in place
        return read * 3

    graph = make_fx(f, tracing_mode="fake")(torch.zeros((), dtype=torch.int64), torch.zeros(3), torch.ones(2, 2)).graph
    assert update_in_place(graph) == 2
    targets = [n.target for n in graph.nodes if n.op == "call_function"]
    assert targets.count(aten.add_.Tensor) == 1 and targets.count(aten.mul_.Tensor) == 1
    assert targets.count(aten.copy_.default) == 1


def test_only_the_final_copies_into_distinct_inputs_are_batched():
    def f(a, b, c, d):
        early = a * 2
        d.copy_(early)  # not at the end: kept
        e = early + d
        up, down = e + 1, e - 1
        a.copy_(up)  # the final copies, where AOTAutograd puts them
        b.copy_(down)
        c.add_(1)  # an update of another input may stand among them
        return e

    def batched(fn, *shapes):
        graph = make_fx(fn, tracing_mode="fake")(*(torch.zeros(s) for s in shapes)).graph
        return batch_final_writes(graph), graph

    count, graph = batched(f, (3,), (3,), (3,), (3,))
    [foreach] = graph.find_nodes(op="call_function", target=aten._foreach_copy_.default)
    assert count == 2 and [t.name for t in foreach.args[0]] == ["a_1", "b_1"]
    assert len(graph.find_nodes(op="call_function", target=aten.copy_.default)) == 1  # d's

    def twice(a, b):  # the same input written twice: not batched
        one, two = b + 1, b + 2
        a.copy_(one)
        a.copy_(two)
        return one

    def other_shape(a, b):  # a copy that broadcasts: not batched
        first, doubled = b[:1] + 1, b * 2
        a.copy_(first)
        b.copy_(doubled)
        return first  # (returning b would read the copy's result)

    def viewed(a, b):  # b's new value is a view of a, which the batch also writes: not batched
        new_a = b * 2
        b.copy_(a.view(3))
        a.copy_(new_a)
        return new_a

    assert batched(twice, (3,), (3,))[0] == 0
    assert batched(viewed, (3,), (3,))[0] == 0
    assert batched(other_shape, (3,), (3,))[0] == 0
