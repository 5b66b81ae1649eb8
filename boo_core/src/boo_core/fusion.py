"""The fusion-pattern contract: how a plugin tells the torch.compile backends what it can run.

The backends see aten-level FX graphs (after AOTAutograd, forward and backward). A
:class:`FusionPattern` looks at one node at a time; when the node (and maybe some that
follow it) is something the plugin's kernels compute, :meth:`FusionPattern.match` returns a
:class:`FusionMatch`: the matched nodes, the tensors the kernel takes, and a JSON-able
``spec`` holding every other argument. The backend compiles the pattern's
:meth:`~FusionPattern.signatures` ahead of time (a failure falls back to PyTorch with a
warning), then replaces the nodes with a call to :meth:`~FusionPattern.launch`.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.fx

from .signature import Signature


@dataclass(frozen=True)
class FusionMatch:
    """What a pattern matched.

    ``nodes`` are the matched nodes in graph order; the last one is the *root*, whose value
    (a tensor, or a tuple of tensors and Nones) the kernel produces. Every other matched
    node must be used only by matched nodes. ``inputs`` are the tensor arguments of the
    kernel call, in order; ``spec`` holds every other argument, JSON-able (ints, floats,
    strings, bools, None, lists and dicts of those).
    """

    nodes: tuple[torch.fx.Node, ...]
    inputs: tuple[torch.fx.Node, ...]
    spec: Mapping[str, Any]

    @property
    def root(self) -> torch.fx.Node:
        return self.nodes[-1]


class FusionPattern(abc.ABC):
    """One kind of subgraph a plugin's BOO kernels compute. See the module docstring."""

    #: Unique name, ``<op>.<what>`` by convention (``conv.forward``); shown in summaries.
    name: ClassVar[str]
    #: The aten ops a match starts from. The Inductor-nested backend keeps them out of its
    #: decompositions so that the pattern can see them.
    anchors: ClassVar[tuple[torch._ops.OpOverload, ...]] = ()

    @abc.abstractmethod
    def match(self, node: torch.fx.Node) -> FusionMatch | None:
        """A match rooted in or starting at ``node``, or None.

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
