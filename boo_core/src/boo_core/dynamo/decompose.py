"""Decompose, after BOO's pass, the anchor ops that BOO withheld from Inductor but did not take.

``iree_boo_inductor`` keeps Inductor from decomposing fusion anchors (layer norm, say) so
that BOO's pass can see them. An anchor BOO then declines (a backward graph with backward
kernels off, a dynamic shape, a dtype no plugin serves) must still reach Inductor in the
form it expects: decomposed, exactly as Inductor would have done it. Without this, Inductor
falls back to the aten kernel for it (and, with ``CI`` set, refuses to compile).
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.fx
from torch.utils._pytree import tree_flatten, tree_unflatten

DecompositionTable = Mapping[Any, Callable[..., Any]]


def decompose_remaining(gm: torch.fx.GraphModule, withheld: DecompositionTable,
                        full_table: DecompositionTable) -> int:
    """Inline the decomposition of every node whose op is in ``withheld``; return how many.

    The decomposition is traced with ``full_table`` so that what it calls is decomposed as
    far as Inductor's own tracing would have taken it.
    """
    nodes = [n for n in gm.graph.nodes if n.op == "call_function" and n.target in withheld]
    for node in nodes:
        _inline_decomposition(gm.graph, node, full_table)
    if nodes:
        gm.graph.lint()
        gm.recompile()
    return len(nodes)


def _inline_decomposition(graph: torch.fx.Graph, node: torch.fx.Node, full_table: DecompositionTable) -> None:
    from torch._guards import detect_fake_mode
    from torch.fx.experimental.proxy_tensor import make_fx

    flat, spec = tree_flatten((node.args, node.kwargs))
    positions = [i for i, value in enumerate(flat) if isinstance(value, torch.fx.Node)]
    examples = [flat[i].meta["val"] for i in positions]

    def call(*tensors: Any) -> Any:
        values = list(flat)
        for i, tensor in zip(positions, tensors):
            values[i] = tensor
        args, kwargs = tree_unflatten(values, spec)
        # Traced through the table: a decomposition that declines (returns NotImplemented,
        # as convolution_backward's does for most shapes) leaves the op itself in the graph.
        return node.target(*args, **kwargs)

    fake_mode = detect_fake_mode(examples)
    with fake_mode if fake_mode is not None else contextlib.nullcontext():
        traced = make_fx(call, decomposition_table=dict(full_table), tracing_mode="real")(*examples)
    placeholders = [n for n in traced.graph.nodes if n.op == "placeholder"]
    value_map = {p: flat[i] for p, i in zip(placeholders, positions)}
    with graph.inserting_before(node):
        result = graph.graph_copy(traced.graph, value_map)
    _replace_uses(node, result)
    graph.erase_node(node)


def _replace_uses(node: torch.fx.Node, result: Any) -> None:
    if isinstance(result, torch.fx.Node):
        node.replace_all_uses_with(result)
        return
    # A multi-output op: its users are getitem nodes picking one result each.
    for user in list(node.users):
        if user.target is not operator.getitem:
            raise RuntimeError(f"cannot inline the decomposition of {node.target}: used by {user.format_node()}")
        picked = result[user.args[1]]
        user.replace_all_uses_with(picked)
        user.graph.erase_node(user)

