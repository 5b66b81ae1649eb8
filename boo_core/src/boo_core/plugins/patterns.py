"""The fusion-pattern contract: how a plugin tells the torch.compile backends what it can run.

The backends see aten-level FX graphs (after AOTAutograd, forward and backward). A
:class:`FusionPattern` looks at one node at a time; when the node (and maybe some that
follow it) is something the plugin's kernels compute, :meth:`FusionPattern.match` returns a
:class:`FusionMatch`: the matched nodes, the tensors the kernel takes, and a JSON-able
``spec`` holding every other argument. The backend compiles the pattern's
:meth:`~FusionPattern.signatures` ahead of time (a failure falls back to PyTorch with a
warning), then replaces the nodes with a call to :meth:`~FusionPattern.launch`, or to what
:meth:`~FusionPattern.bind` settled ahead for those tensors.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.fx

from ..signatures.signature import Signature


@dataclass(frozen=True)
class FusionMatch:
    """What a pattern matched.

    ``nodes`` are the matched nodes in graph order; the last one is the *root*, whose value
    the kernel produces: a tensor, or, for an op that returns several values
    (``native_layer_norm`` returns ``(y, mean, rstd)``), a tuple of tensors and Nones that
    the rest of the graph reads through ``operator.getitem`` nodes (which stay in the graph
    and read the kernel's tuple instead). Every other matched node must be used only by
    matched nodes (:func:`only_user` tells whether a node has exactly one user). ``inputs``
    are the tensor arguments of the kernel call, in order; ``spec`` holds every other argument, JSON-able (ints, floats,
    strings, bools, None, lists and dicts of those).

    ``applied`` are nodes the kernel applies to the root's values itself, in order: each a
    function of one ``getitem(root, i)`` or of one earlier applied node (its *source*, whose
    only user it is), of the same shape, whose other node arguments, if any, are among
    ``inputs`` and come before the root in the graph. The launch returns item ``i`` with
    them applied, and what read the last of them reads that (a training batch norm adds a
    residual and applies its ReLU, and writes a bf16 model's running statistics in bf16: no
    kernels after it).

    ``exposed`` are matched nodes before the root whose values the kernel also returns,
    after the root's own items, in order (the root's value must be a tuple): the rest of the
    graph may read them, from the kernel's items, where it reads them after the root (a
    batch norm's backward computes a ReLU's gradient that a residual block's other branch
    reads too).
    """

    nodes: tuple[torch.fx.Node, ...]
    inputs: tuple[torch.fx.Node, ...]
    spec: Mapping[str, Any]
    applied: tuple[torch.fx.Node, ...] = ()
    exposed: tuple[torch.fx.Node, ...] = ()

    @property
    def root(self) -> torch.fx.Node:
        return self.nodes[-1]


@dataclass(frozen=True)
class Decline:
    """What :meth:`FusionPattern.match` returns for a node it recognises but will not take:
    ``reason`` appears in the offload summary (``offload_summary()``, the INFO log)."""

    reason: str


class FusionPattern(abc.ABC):
    """One kind of subgraph a plugin's BOO kernels compute. See the module docstring."""

    #: Unique name, ``<op>.<what>`` by convention (``conv.forward``); shown in summaries.
    name: ClassVar[str]
    #: The aten ops a match starts from. The Inductor-nested backend keeps them out of its
    #: decompositions so that the pattern can see them.
    anchors: ClassVar[tuple[torch._ops.OpOverload, ...]] = ()

    @abc.abstractmethod
    def match(self, node: torch.fx.Node) -> FusionMatch | Decline | None:
        """A match rooted in or starting at ``node``; a :class:`Decline` with the reason
        for a node this pattern will not take; or None (not this pattern's business).

        Called for every ``call_function`` node whose target is in :attr:`anchors`, in
        graph order. Node metadata ``node.meta["val"]`` holds fake tensors with the shapes,
        strides and dtypes seen at compile time.
        """

    @abc.abstractmethod
    def signatures(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> Sequence[Signature]:
        """The signatures :meth:`launch` will run for these inputs (fake tensors with the
        compile-time metadata). BOO compiles them before the graph runs. Raise
        :class:`~boo_core.errors.UnsupportedError` for a match the kernels cannot serve;
        the nodes then stay with PyTorch and the summary shows the reason."""

    @abc.abstractmethod
    def launch(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> Any:
        """Compute the root's value with BOO kernels: a tensor, or a tuple shaped like the
        root's value (None where the root's value has None)."""

    @abc.abstractmethod
    def reference(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> Any:
        """Compute the root's value with PyTorch (used if a launch fails at run time)."""

    def bind(self, spec: Mapping[str, Any], inputs: Sequence[torch.Tensor]) -> BoundLaunch | None:
        """What :meth:`launch` does for tensors with these inputs' metadata, decided once.

        A compiled graph calls its nodes with tensors of the same shapes, strides, dtypes and
        device at every step, so everything that depends only on those (argument checks,
        layout permutations, the kernels) can be settled when the graph compiles. The
        returned function takes the inputs and returns the root's value, or None, launching
        nothing, when the tensors are not what it was bound for (then :meth:`launch` runs:
        :meth:`~boo_core.Launchable.try_call` is the guard to use). ``inputs`` may be fake
        tensors: read only their metadata. The default, None, runs :meth:`launch` at every
        call.
        """
        return None


BoundLaunch = Callable[..., Any]
"""A pattern's launch with everything but the tensors decided (:meth:`FusionPattern.bind`)."""


class ContiguousFirst:
    """A bound launch (bound for contiguous tensors at ``positions``; every position where
    None) given tensors that may not be: it makes those contiguous first (one that is stays
    itself), the copy a general launch would make, without its lookups. It keeps ``call``'s
    ``discarded`` outputs (a ``DirectCall``'s), which tell the graph's node that the Nones at
    those places are outputs nothing reads."""

    def __init__(self, call: BoundLaunch, positions: Collection[int] | None = None) -> None:
        self.call = call
        self.positions = None if positions is None else frozenset(positions)
        self.discarded: tuple[int, ...] = getattr(call, "discarded", ())

    def __call__(self, *tensors: torch.Tensor) -> Any:
        return self.call(*(t.contiguous() if self.positions is None or i in self.positions else t
                           for i, t in enumerate(tensors)))


#: What :attr:`GraphRewrite.graph` may say.
REWRITTEN_GRAPHS = ("forward", "joint")


class GraphRewrite(abc.ABC):
    """An equivalent rewrite of aten nodes that runs on every forward and inference graph
    before the fusion patterns match: how one plugin hands its op to another plugin's
    patterns without importing that plugin. Aten ops are the common language: the batch-norm
    plugin folds an inference batch norm into the ``aten.convolution`` before it (new weight
    and bias computed by aten ops in the graph), and the conv plugin's pattern then takes
    that convolution, bias and following activation as one kernel.

    Build new nodes with :func:`insert_aten` (it records their fake values, which patterns
    read) and leave the graph valid whatever the rest of BOO does with it: the nested
    backend runs whatever no pattern takes. A rewrite is not offered a node that a pattern
    anchored at another node takes as the graph stands (the conv plugin's conv + batch norm
    + activation kernel takes the batch norm the fold would rewrite): one kernel for the
    whole match wins over rewriting part of it.

    A rewrite whose ``graph`` is ``"joint"`` runs instead on the joint forward and backward
    graph of a training step, before AOTAutograd partitions it into the two: what changes
    there is what the forward saves for the backward (the batch-norm plugin stops a training
    batch norm's gradient reading the running statistics it ignores, so the forward no longer
    saves them: 106 tensors a ResNet-50 step).
    """

    #: Unique name, ``<op>.<what>``; rewrites applied are counted under it in the report.
    name: ClassVar[str]
    #: The graphs it rewrites: ``"forward"`` (forward and inference graphs, before the
    #: patterns match) or ``"joint"`` (a training step's joint graph, before it is partitioned).
    graph: ClassVar[str] = "forward"
    #: The aten ops :meth:`apply` is called for.
    anchors: ClassVar[tuple[torch._ops.OpOverload, ...]] = ()

    @abc.abstractmethod
    def apply(self, node: torch.fx.Node) -> bool:
        """Rewrite the graph at ``node`` (an anchor op) in place; whether it did."""


#: ``node.meta`` key of nodes left to the nested backend: no fusion pattern is offered them.
NESTED = "boo_nested"


def insert_aten(graph: torch.fx.Graph, op: Callable[..., Any], *args: Any, nested: bool = False,
                **kwargs: Any) -> torch.fx.Node:
    """A ``call_function`` node of ``op`` on ``args`` and ``kwargs`` (nodes or constants),
    inserted at the graph's current insertion point, with ``meta["val"]`` computed from its
    inputs' fake values. ``nested=True`` leaves the node to the nested backend: a rewrite's
    own arithmetic (a batch norm of a weight, say) that no pattern should take."""
    node = graph.call_function(op, tuple(args), kwargs)
    values = [a.meta["val"] for a in args if isinstance(a, torch.fx.Node)]
    mode = torch._guards.detect_fake_mode(values)
    fake_args = [a.meta["val"] if isinstance(a, torch.fx.Node) else a for a in args]
    with mode if mode is not None else contextlib.nullcontext():
        node.meta["val"] = op(*fake_args, **kwargs)
    if nested:
        node.meta[NESTED] = True
    return node


def conversion_of(item: torch.fx.Node) -> torch.fx.Node | None:
    """The node that only changes the dtype of ``item`` (an ``aten._to_copy`` of dtype alone or
    a ``prims.convert_element_type``), where that is ``item``'s only user; else None."""
    user = only_user(item)
    if user is None or user.args[:1] != (item,):
        return None
    if user.target is torch.ops.prims.convert_element_type.default:
        return user
    if user.target is torch.ops.aten._to_copy.default and len(user.args) == 1 \
            and set(user.kwargs) <= {"dtype", "layout"} and user.kwargs.get("layout", torch.strided) is torch.strided \
            and isinstance(tensor_value(user), torch.Tensor):
        return user
    return None


def tensor_value(node: torch.fx.Node) -> torch.Tensor | None:
    """The fake tensor a node produced at compile time, if it produced one tensor."""
    value = node.meta.get("val")
    return value if isinstance(value, torch.Tensor) else None


def has_static_shape(node: torch.fx.Node) -> bool:
    """Whether a node's tensor value has only concrete (non-symbolic) sizes and strides."""
    value = tensor_value(node)
    return value is not None and all(isinstance(d, int) for d in (*value.shape, *value.stride()))


def only_user(node: torch.fx.Node) -> torch.fx.Node | None:
    """The one node that uses ``node``, or None if it has zero or several users."""
    return next(iter(node.users)) if len(node.users) == 1 else None


def read_before(node: torch.fx.Node, readers: Collection[torch.fx.Node]) -> bool:
    """Whether any of ``readers`` comes before ``node`` in its graph (a kernel call put in
    ``node``'s place would give them its values too late: :attr:`FusionMatch.exposed`)."""
    earlier = node.prev
    while earlier.op != "root":  # the graph's sentinel, before its first node
        if earlier in readers:
            return True
        earlier = earlier.prev
    return False


def node_arguments(node: torch.fx.Node) -> dict[str, Any]:
    """A ``call_function`` node's arguments by the name its aten schema gives them,
    positional and keyword alike, defaults filled in: for ``aten.convolution`` that is
    ``{"input": ..., "weight": ..., "bias": ..., "stride": [...], ..., "groups": 1}``."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        raise TypeError(f"{node.format_node()}: its target has no schema (not an aten op overload)")
    bound: dict[str, Any] = {}
    for index, argument in enumerate(schema.arguments):
        if index < len(node.args):
            bound[argument.name] = node.args[index]
        elif argument.name in node.kwargs:
            bound[argument.name] = node.kwargs[argument.name]
        elif argument.has_default_value():
            bound[argument.name] = argument.default_value
    return bound


def static_ints(values: Any) -> list[int] | None:
    """``values`` (an int or a list of them, as aten passes strides and paddings) as a list
    of plain ints; None when any is symbolic (a dynamic shape)."""
    values = values if isinstance(values, (list, tuple)) else [values]
    if not all(isinstance(v, int) for v in values):
        return None
    return [int(v) for v in values]
