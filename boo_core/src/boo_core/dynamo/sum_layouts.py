"""Residual sums kept in their contiguous operand's layout.

A batch-first ``nn.MultiheadAttention`` returns a transposed view of its sequence-first
result, and a residual add ``attention + x`` takes its first operand's layout (TensorIterator's
rule for operands of different layouts). From there on a vision transformer's residual stream
lies in sequence-first order behind its batch-first shape, and every kernel that reads it
as rows copies it first: BOO's layer norms (forward and backward) and the residual operand of
the MLP's second product, five copies a layer of a ViT-B/16 training step. An add is
commutative, so ``x + attention`` computes the same values in ``x``'s (contiguous) layout.

:func:`keep_sums_contiguous` swaps the operands of such adds wherever the graph lets it:
every node whose layout changes as a consequence (the add, and sums that take it first) is
read only by ops whose results do not depend on their inputs' layouts (adds, layer norms and
their gradients), and none of them is an output of the graph. The nodes' traced values are
re-derived under the graph's fake-tensor mode, so the kernels bound later see the layouts
the graph will run with.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx
from torch._guards import detect_fake_mode
from torch._prims_common import make_contiguous_strides_for

from .layouts import Layout, dense_layout

aten = torch.ops.aten

#: Ops whose results do not depend on their tensor inputs' layouts (only their own outputs'
#: layouts may), so a node read by them may change layout.
LAYOUT_FREE_READERS = frozenset({aten.add.Tensor, aten.native_layer_norm.default,
                                 aten.native_layer_norm_backward.default, operator.getitem})


def keep_sums_contiguous(graph: torch.fx.Graph) -> int:
    """Swap the operands of each two-tensor add whose first operand is a permuted dense
    tensor and whose second is contiguous of the same shape, where the module docstring's
    conditions hold; how many adds were swapped."""
    swapped = 0
    order = {node: index for index, node in enumerate(graph.nodes)}
    for node in list(graph.nodes):
        if not _candidate(node):
            continue
        first, second = node.args
        node.args = (second, first)
        if _relaid(node, order):
            swapped += 1
        else:
            node.args = (first, second)
    return swapped


def _value(node: Any) -> Any:
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _candidate(node: torch.fx.Node) -> bool:
    if node.op != "call_function" or node.target is not aten.add.Tensor or node.kwargs or len(node.args) != 2:
        return False
    first, second = (_value(a) for a in node.args)
    if not (isinstance(first, torch.Tensor) and isinstance(second, torch.Tensor)) \
            or first.dtype != second.dtype or first.device != second.device:
        return False
    first_layout, second_layout = dense_layout(first), dense_layout(second)  # None for symbolic sizes
    if first_layout is None or second_layout is None or first_layout[0] != second_layout[0]:
        return False
    return not _contiguous(first_layout) and _contiguous(second_layout)


def _contiguous(layout: Layout) -> bool:
    shape, strides, _ = layout
    return all(stride == want for size, stride, want in zip(shape, strides, make_contiguous_strides_for(shape))
               if size != 1)


def _relaid(add: torch.fx.Node, order: dict[torch.fx.Node, int]) -> bool:
    """Re-derive the traced values of ``add`` and of every node its new layout reaches;
    whether all of them may change (else every value is restored)."""
    old: dict[torch.fx.Node, Any] = {}
    pending, ok = [add], True
    while pending and ok:
        node = min(pending, key=order.__getitem__)  # after everything it reads
        pending.remove(node)
        value = _rerun(node) if node is add or node.target in LAYOUT_FREE_READERS else None
        ok = value is not None
        if ok and (node is add or not _same_layouts(value, _value(node))):
            old[node], node.meta["val"] = node.meta["val"], value
            ok = all(user.op != "output" for user in node.users)
            pending += [user for user in node.users if user not in pending]
    if not ok:
        for node, value in old.items():
            node.meta["val"] = value
    return ok


def _rerun(node: torch.fx.Node) -> Any:
    """``node``'s value computed from its inputs' traced values under their fake mode (None
    where they have none)."""
    args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), _value)
    mode = detect_fake_mode((args, kwargs))
    if mode is None:
        return None
    with mode:
        return node.target(*args, **kwargs)


def _same_layouts(new: Any, old: Any) -> bool:
    if isinstance(new, torch.Tensor) and isinstance(old, torch.Tensor):
        return new.shape == old.shape and new.stride() == old.stride()
    if isinstance(new, (tuple, list)) and isinstance(old, (tuple, list)) and len(new) == len(old):
        return all(_same_layouts(n, o) for n, o in zip(new, old, strict=True))
    return new is None and old is None
