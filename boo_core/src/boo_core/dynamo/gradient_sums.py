"""Sums of selections' gradients that fill a tensor, made one stack.

``nn.MultiheadAttention`` splits its packed projection into q, k and v by selecting along a
new leading dim (``packed[0]``, ``packed[1]``, ``packed[2]``). AOTAutograd's backward of that
is ``select_backward(dq, shape, 0, 0) + select_backward(dk, shape, 0, 1) + select_backward(dv,
shape, 0, 2)``: three tensors of zeros of the packed shape, each given one gradient, then
summed. An eager nested backend runs that as 3 fills, 3 copies and 2 adds over the whole
packed tensor (a ViT-B/16 step: 36 fills and 24 adds of 29 MB each, on the H200 about
0.35 and 0.6 ms of its device time). Where the selections' indices cover the dim once each,
the sum is ``stack([dq, dk, dv], dim)``: one kernel that writes each gradient once.
"""

from __future__ import annotations

import torch
import torch.fx

aten = torch.ops.aten


def stack_selection_gradients(graph: torch.fx.Graph) -> int:
    """Replace each sum of ``select_backward`` nodes that together fill their tensor (every
    index of the selected dim once, nothing else added, no other reader of the parts) with
    one ``aten.stack``; how many sums were replaced."""
    replaced = 0
    for node in reversed(list(graph.nodes)):  # a sum's last add first: it holds the whole tree
        if node.graph is None or not _is_plain_add(node):
            continue
        tree = _sum_tree(node, root=True)
        if tree is None:
            continue
        adds, selections = tree
        dim = _stacked_dim(node, selections)
        if dim is None:
            continue
        by_index = sorted(selections, key=lambda s: _index(s, dim))
        with graph.inserting_before(node):
            stacked = graph.call_function(aten.stack.default, ([s.args[0] for s in by_index], dim))
        stacked.meta = dict(node.meta)
        node.replace_all_uses_with(stacked)
        for dead in (*adds, *selections):  # users before what they read
            graph.erase_node(dead)
        replaced += 1
    return replaced


def _is_plain_add(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and node.target is aten.add.Tensor and len(node.args) == 2 \
        and not node.kwargs and all(isinstance(a, torch.fx.Node) for a in node.args)


def _sum_tree(node: torch.fx.Node, *, root: bool = False
              ) -> tuple[list[torch.fx.Node], list[torch.fx.Node]] | None:
    """(the adds, the select_backward leaves) of the sum ending at ``node``, users first;
    None unless every part below the root has the sum as its only reader."""
    if not root and len(node.users) != 1:
        return None
    if node.op == "call_function" and node.target is aten.select_backward.default:
        return [], [node]
    if not _is_plain_add(node):
        return None
    adds, leaves = [node], []
    for operand in node.args:
        below = _sum_tree(operand)
        if below is None:
            return None
        adds += below[0]
        leaves += below[1]
    return adds, leaves


def _index(selection: torch.fx.Node, dim: int) -> int:
    size = selection.args[1][dim]
    return selection.args[3] % size


def _stacked_dim(root: torch.fx.Node, selections: list[torch.fx.Node]) -> int | None:
    """The dim the selections fill, each index once, in the sum's shape, dtype and (dense)
    layout; None otherwise."""
    sizes = selections[0].args[1]
    try:
        sizes = [int(s) for s in sizes]
    except TypeError:  # symbolic sizes
        return None
    dim = selections[0].args[2] % len(sizes)
    if any([int(s) for s in t.args[1]] != sizes or t.args[2] % len(sizes) != dim for t in selections):
        return None
    if sorted(_index(s, dim) for s in selections) != list(range(sizes[dim])):
        return None
    value = root.meta.get("val")
    if not isinstance(value, torch.Tensor) or list(value.shape) != sizes or not value.is_contiguous():
        return None  # stack writes a dense tensor in the sum's shape
    for selection in selections:
        gradient = selection.args[0].meta.get("val") if isinstance(selection.args[0], torch.fx.Node) else None
        if not isinstance(gradient, torch.Tensor) or gradient.dtype != value.dtype:
            return None
    return dim
