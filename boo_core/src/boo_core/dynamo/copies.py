"""Copies a compiled graph need not make: ``aten.clone`` of a tensor into the same layout.

AOTAutograd writes an inference ``dropout`` (and a few other identities) as ``aten.clone``.
Inductor removes such copies as it fuses; an eager nested backend (``iree_boo``) would run
each as a kernel: a ViT-B/16 inference step made 37 device-to-device copies this way. In a
functional graph a clone that keeps its input's layout computes nothing, so its users can
read the input itself, unless aliasing would show: the input is a graph input, the clone is
a graph output, or some node writes in place into either. A graph that writes in place
anywhere (a training forward updating a batch norm's running statistics with ``copy_``)
keeps all its clones: a view of what is written could reach a clone's source.
"""

from __future__ import annotations

import operator

import torch
import torch.fx

aten = torch.ops.aten


def drop_noop_clones(graph: torch.fx.Graph) -> int:
    """Replace every clone that copies its input into the same layout by the input, in
    place (module docstring); how many were dropped."""
    if any(writes_in_place(node) for node in graph.nodes):
        return 0
    dropped = 0
    for node in list(graph.find_nodes(op="call_function", target=aten.clone.default)):
        source = node.args[0] if node.args else None
        if isinstance(source, torch.fx.Node) and _is_noop(node, source):
            node.replace_all_uses_with(source)
            graph.erase_node(node)
            dropped += 1
    return dropped


def _is_noop(clone: torch.fx.Node, source: torch.fx.Node) -> bool:
    before, after = source.meta.get("val"), clone.meta.get("val")
    if not isinstance(before, torch.Tensor) or not isinstance(after, torch.Tensor):
        return False
    if (before.shape, before.stride(), before.dtype, before.device) != (after.shape, after.stride(), after.dtype,
                                                                         after.device):
        return False
    if source.op == "placeholder" or any(user.op == "output" for user in clone.users):
        return False  # the result would alias a graph input, or an output another may mutate
    return not any(_opaque(user) for user in (*source.users, *clone.users))


def writes_in_place(node: torch.fx.Node) -> bool:
    """Whether ``node`` is an aten op whose schema says it writes into an argument."""
    schema = getattr(node.target, "_schema", None) if node.op == "call_function" else None
    return schema is not None and schema.is_mutable


def _opaque(node: torch.fx.Node) -> bool:
    """Whether ``node`` is a user whose writes the graph's schemas cannot rule out: not an
    aten op (those that write in place already kept every clone), an indexing or the output."""
    if node.op == "output" or node.target is operator.getitem:
        return False
    return node.op != "call_function" or getattr(node.target, "_schema", None) is None
