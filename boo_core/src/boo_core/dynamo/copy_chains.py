"""Chains of copies made one copy.

A backward graph of batch-first attention moves each of the gradients dq, dk and dv through
two copies (one to make it contiguous, one after a transpose), stacks the three (the packed
projection's gradient, :mod:`.gradient_sums`) and copies the stack once more into the
layout of the input projection's matmul: eight copies per layer, each of which an eager
nested backend runs as a kernel, where every element of the last one comes from one element
of dq, dk or dv. When a ``clone`` is reached from its sources through views, clones and
stacks only, its values are found by replaying that subgraph on the sources' storage offsets
(the sources told apart by a multiple of a span); where each slice of it along one dim comes
from one source as a strided view, the clone becomes one ``stack`` of those views (or one
copy of a view, for one source). At run time each view checks that its source has the traced
layout; if one does not, the graph's own copies run instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from .copies import writes_in_place
from .layouts import VIEWS, Layout, affine_layout, dense_layout, node_value, release_offsets, storage_offsets

aten = torch.ops.aten
_MOVES = frozenset({aten.clone.default, aten.stack.default})
#: The most source elements a chain is analysed for (its offsets are int64 tensors of that size).
MAX_ELEMENTS = 1 << 26

#: How many times a :class:`Gathered` met a source laid out otherwise than traced.
fallbacks = 0


@dataclass(frozen=True, eq=False)
class Gathered:
    """The clone's value from its sources: each slice along ``dim`` a strided view of one
    source (``parts``: the source's position and the view's layout), stacked; ``dim`` None
    for one part, copied. ``steps`` replay the graph's own copies where a source's layout is
    not ``traced``."""

    traced: tuple[Layout, ...]
    parts: tuple[tuple[int, Layout], ...]
    dim: int | None
    steps: tuple[tuple[Any, tuple[Any, ...], tuple[tuple[str, Any], ...]], ...]

    @property
    def __name__(self) -> str:  # FX names the node after its target
        return "gathered"

    def __call__(self, *sources: torch.Tensor) -> torch.Tensor:
        if any((tuple(s.shape), s.stride(), s.storage_offset()) != t for s, t in zip(sources, self.traced)):
            global fallbacks
            fallbacks += 1
            return _replay(self.steps, sources)
        views = [sources[i].as_strided(*layout) for i, layout in self.parts]
        if self.dim is None:
            return views[0].clone(memory_format=torch.contiguous_format)
        return torch.stack(views, self.dim)


def collapse_copy_chains(graph: torch.fx.Graph) -> int:
    """Replace each clone reached from its sources through at least one other copy (a
    clone or a stack) and views only, every node between read by the chain alone, with
    one :class:`Gathered` node where its values allow (module docstring); how many copies
    the graph no longer makes."""
    if any(writes_in_place(node) for node in graph.nodes):
        return 0  # a source written between the chain's first copy and its last would change what it reads
    saved = 0
    for node in reversed(list(graph.nodes)):
        if node.graph is None or node.op != "call_function" or node.target is not aten.clone.default:
            continue
        chain = _chain(node)
        if chain is None:
            continue
        nodes, sources = chain
        copies = sum(n.target in _MOVES for n in nodes)
        if copies < 2:
            continue
        gathered = _gathered(node, nodes, sources)
        if gathered is None:
            continue
        with graph.inserting_before(node):
            new = graph.call_function(gathered, tuple(sources))
        new.meta = dict(node.meta)
        node.replace_all_uses_with(new)
        for dead in reversed(nodes):  # users before what they read
            graph.erase_node(dead)
        saved += copies - 1
    return saved


def _chain(last: torch.fx.Node) -> tuple[list[torch.fx.Node], list[torch.fx.Node]] | None:
    """(the chain's nodes in graph order, ``last`` included; its sources in order of first
    use) for the data movement ending at ``last``; None where a node between reads anything
    but the chain's values or is read elsewhere."""
    nodes: list[torch.fx.Node] = []
    sources: list[torch.fx.Node] = []
    pending = [last]
    while pending:
        node = pending.pop()
        if node in nodes:
            return None  # read twice (a diamond): leave it
        nodes.append(node)
        if node.target is aten.stack.default:
            inputs = list(node.args[0])
            if len(node.args) > 1 and not isinstance(node.args[1], int) or node.kwargs:
                return None
        else:
            inputs = [node.args[0]]
            if any(isinstance(a, torch.fx.Node) for a in (*node.args[1:], *node.kwargs.values())):
                return None
        for source in inputs:
            if not isinstance(source, torch.fx.Node):
                return None
            inside = source.op == "call_function" and (source.target in _MOVES or source.target in VIEWS)
            if inside and len(source.users) == 1:
                pending.append(source)
            elif source not in sources:
                sources.append(source)
    order = {n: i for i, n in enumerate(last.graph.nodes)}
    return sorted(nodes, key=order.__getitem__), sorted(sources, key=order.__getitem__)


def _gathered(last: torch.fx.Node, nodes: list[torch.fx.Node], sources: list[torch.fx.Node]) -> Gathered | None:
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    traced = [dense_layout(node_value(s)) if node_value(s) is not None else None for s in sources]
    result = node_value(last)
    if any(t is None for t in traced) or result is None or not result.is_contiguous():
        return None
    position = {s: i for i, s in enumerate(sources)}
    env_index = {**position, **{n: len(sources) + i for i, n in enumerate(nodes)}}
    steps = tuple((n.target, _indexed(n.args, env_index), tuple(n.kwargs.items())) for n in nodes)
    if sum(math.prod(t[0]) for t in traced) > MAX_ELEMENTS:
        return None
    with unset_fake_temporarily():  # real tensors of storage offsets, whatever mode the compiler runs in
        try:
            offsets = [storage_offsets(t) for t in traced]
            span = max(int(o.max()) + 1 for o in offsets)
            encoded = [o + i * span for i, o in enumerate(offsets)]
            values = _replay(steps, encoded)
            parts = _parts(values, span)
        except (RuntimeError, ValueError):
            return None
        finally:
            release_offsets()
    if parts is None:
        return None
    dim, found = parts
    return Gathered(tuple(traced), found, dim, steps)


def _parts(values: torch.Tensor, span: int) -> tuple[int | None, tuple[tuple[int, Layout], ...]] | None:
    """(the dim, each slice's source and view layout), or (None, the one part) for one source."""
    source, offsets = values // span, values % span
    if int(source.min()) == int(source.max()):
        found = affine_layout(offsets)
        return None if found is None else (None, ((int(source.min()), (tuple(values.shape), *found)),))
    for dim in range(values.dim()):
        per_slice = source.movedim(dim, 0).reshape(values.shape[dim], -1)
        if not torch.equal(per_slice.min(dim=1).values, per_slice.max(dim=1).values):
            continue
        parts = []
        for index in range(values.shape[dim]):
            piece = offsets.select(dim, index)
            found = affine_layout(piece)
            if found is None:
                return None
            parts.append((int(per_slice[index, 0]), (tuple(piece.shape), *found)))
        return dim, tuple(parts)
    return None


def _indexed(value: Any, env_index: dict[torch.fx.Node, int]) -> Any:
    """Op arguments with each node replaced by its position in the replay's values."""
    if isinstance(value, torch.fx.Node):
        return _Ref(env_index[value])
    if isinstance(value, (list, tuple)):
        return type(value)(_indexed(v, env_index) for v in value)
    return value


@dataclass(frozen=True)
class _Ref:
    index: int


def _replay(steps: Sequence[tuple[Any, tuple[Any, ...], tuple[tuple[str, Any], ...]]],
            sources: Sequence[torch.Tensor]) -> torch.Tensor:
    """The chain's value computed the graph's way from ``sources``."""
    values = list(sources)

    def resolve(value: Any) -> Any:
        if isinstance(value, _Ref):
            return values[value.index]
        if isinstance(value, (list, tuple)):
            return type(value)(resolve(v) for v in value)
        return value

    for target, args, kwargs in steps:
        values.append(target(*resolve(args), **dict(kwargs)))
    return values[-1]
