"""Copies a compiled graph need not make: ``aten.clone`` of a tensor into the same layout,
and the ``copy_`` of an update into the graph input it was computed from.

AOTAutograd writes an inference ``dropout`` (and a few other identities) as ``aten.clone``.
Inductor removes such copies as it fuses; an eager nested backend (``iree_boo``) would run
each as a kernel: a ViT-B/16 inference step made 37 device-to-device copies this way. In a
functional graph a clone that keeps its input's layout computes nothing, so its users can
read the input itself, unless aliasing would show: the input is a graph input, the clone is
a graph output, or some node writes in place into either. A graph that writes in place
anywhere (a training forward updating a batch norm's running statistics with ``copy_``)
keeps all its clones: a view of what is written could reach a clone's source.

A training forward keeps its writes into the model's buffers in the graph (the backends ask
AOTAutograd to): a batch norm's step counter is ``copy_(count, add(count, 1))``, two kernels,
the second a device-to-device copy. Under an eager nested backend the pair becomes one
``add_`` where the ``copy_`` was (ResNet-50: 53 copies a training step fewer), and the
other writes at the graph's end (the running means and variances: 106) one
``_foreach_copy_``, a launch or two instead of one per buffer.
"""

from __future__ import annotations

import operator

import torch
import torch.fx

from ..plugins.patterns import tensor_value

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
    before, after = tensor_value(source), tensor_value(clone)
    if before is None or after is None:
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


#: Out-of-place elementwise ops whose in-place form an update ``copy_(x, op(x, ...))`` becomes.
IN_PLACE = {aten.add.Tensor: aten.add_.Tensor, aten.sub.Tensor: aten.sub_.Tensor,
            aten.mul.Tensor: aten.mul_.Tensor, aten.add.Scalar: aten.add_.Scalar}


def update_in_place(graph: torch.fx.Graph) -> int:
    """Replace each ``copy_(x, op(x, ...))`` of a graph input ``x``, where the copy is the
    op's only user and the op's result is laid out as ``x`` is, by ``op_(x, ...)`` in the
    copy's place (module docstring); how many were replaced."""
    replaced = 0
    for copy in list(graph.find_nodes(op="call_function", target=aten.copy_.default)):
        target, update = (copy.args + (None, None))[:2]
        if not (isinstance(target, torch.fx.Node) and target.op == "placeholder" and isinstance(update, torch.fx.Node)
                and update.op == "call_function" and update.target in IN_PLACE and update.args
                and update.args[0] is target and list(update.users) == [copy] and not copy.kwargs):
            continue
        before, after = tensor_value(target), tensor_value(update)
        if before is None or after is None or \
                (before.shape, before.stride(), before.dtype) != (after.shape, after.stride(), after.dtype):
            continue
        with graph.inserting_before(copy):
            in_place = graph.call_function(IN_PLACE[update.target], update.args, update.kwargs)
        in_place.meta.update(copy.meta)
        copy.replace_all_uses_with(in_place)
        graph.erase_node(copy)
        graph.erase_node(update)
        replaced += 1
    return replaced


def batch_final_writes(graph: torch.fx.Graph) -> int:
    """Replace the ``copy_`` nodes into graph inputs that end the graph (where AOTAutograd
    puts a functional graph's writes into its inputs; in-place updates of other inputs may
    stand among them) by one ``aten._foreach_copy_`` before the output; how many it took.
    Each target a distinct input, each source of its shape, dtype and device, none of them a
    target, no copy's result read."""
    copies, updated = [], set()
    node = graph.output_node().prev
    while node.op == "call_function" and not node.users and node.args and \
            isinstance(node.args[0], torch.fx.Node) and node.args[0].op == "placeholder":
        if node.target is aten.copy_.default and len(node.args) == 2 and not node.kwargs:
            copies.append(node)
        elif node.target in IN_PLACE.values():
            updated.add(node.args[0])
        else:
            break
        node = node.prev
    targets, sources = [c.args[0] for c in reversed(copies)], [c.args[1] for c in reversed(copies)]
    bases = {_base(source) for source in sources}  # a view of a target would read it mid-batch
    if len(copies) < 2 or len(set(targets)) != len(targets) or set(targets) & updated or \
            set(targets) & bases or updated & bases:
        return 0
    for target, source in zip(targets, sources):
        before, after = tensor_value(target), tensor_value(source) if isinstance(source, torch.fx.Node) else None
        if before is None or after is None or \
                (before.shape, before.dtype, before.device) != (after.shape, after.dtype, after.device):
            return 0
    with graph.inserting_before(graph.output_node()):
        graph.call_function(aten._foreach_copy_.default, (targets, sources))
    for copy in copies:
        graph.erase_node(copy)
    return len(copies)


def _base(node: object) -> object:
    """The node whose memory ``node`` views, through aten ops whose result aliases their first
    argument (``view``, ``t``, ``slice``...); ``node`` itself where it is no such view."""
    while isinstance(node, torch.fx.Node) and node.op == "call_function" and node.args:
        schema = getattr(node.target, "_schema", None)
        if schema is None or not schema.returns or schema.returns[0].alias_info is None:
            break
        node = node.args[0]
    return node
