"""Copies that only put a tensor's elements in another order, made unnecessary.

AOTAutograd's graph of ``nn.MultiheadAttention`` with ``batch_first`` (torchvision's ViT)
copies its input into sequence-first order before the input projection, copies the
projection into (3, L, N, E) to split q, k and v, and copies the attention's output into
sequence-first rows before the output projection, whose result is transposed back and copied
once more. An eager nested backend runs each copy as a strided copy kernel (49 per ViT-B/16
step on the H100, 0.9 ms of 4.6). Two rewrites remove them:

* **Rows in storage order.** ``mm(view(clone(z)), w)`` where the clone only reorders whole rows
  of z (its last K elements stay together): a matrix product treats rows independently, so it
  reads z's rows in the order memory holds them, and its result is viewed in the order the
  graph wanted (the bias row after the product, if any, added before that view).
* **Attention reads views.** A clone whose values reach only the q, k and v of scaled
  dot-product attention through views: attention takes any strides with contiguous rows,
  so each of its inputs becomes one strided view of the clone's source.

Both hold for any dense layout the graph was traced with; the strides come from replaying the
graph's view ops on a tensor of storage offsets. At run time each new view first checks that
its source has the traced layout and otherwise computes the old way (a copy). Graphs that
write in place, and values the graph returns, are left alone (as in :mod:`.copies`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from ..plugins.patterns import only_user
from .copies import writes_in_place
from .layouts import (
    VIEWS,
    Layout,
    affine_layout,
    counting,
    dense_layout,
    node_value,
    release_offsets,
    static_layout,
    storage_offsets,
)

aten = torch.ops.aten

_ROW_VIEWS = frozenset({aten.view.default, aten._unsafe_view.default, aten.reshape.default})
_ATTENTION = frozenset({aten._scaled_dot_product_flash_attention.default,
                        aten._scaled_dot_product_efficient_attention.default,
                        aten._scaled_dot_product_cudnn_attention.default,
                        aten._scaled_dot_product_flash_attention_for_cpu.default})

Rows = tuple[torch.fx.Node, torch.fx.Node, tuple[torch.fx.Node, ...]]
"""A matrix of rows a copy reorders: (the node giving the matrix, its source, the copies it replaces)."""


def skip_reordering_copies(gm: torch.fx.GraphModule) -> int:
    """Apply both rewrites (module docstring) to ``gm``'s graph; how many copies it no longer
    makes. The rewrites work on a copy of the graph (every node's ``meta["val"]`` traced again
    as layouts change), which replaces ``gm``'s only if every value the graph returns keeps
    the layout it was traced with (AOTAutograd's wrappers and a backward graph rely on them)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    clones = len(_reordering_clones(gm.graph))
    if not clones or any(writes_in_place(node) for node in gm.graph.nodes):
        return 0  # AOTAutograd writes a copying reshape as clone + view: the reshapes taken are the pass's own
    graph = torch.fx.Graph()
    graph._codegen = gm.graph._codegen  # the calling convention stays the graph's
    value, returned = graph.graph_copy(gm.graph, {}, return_output_node=True)
    graph.output(value).meta.update(returned.meta)
    work = torch.fx.GraphModule(gm, graph)
    reshaped: set[torch.fx.Node] = set()  # views that became copies as layouts changed
    try:
        for _ in range(_ROUNDS):  # each rewrite changes layouts the other may then use
            with unset_fake_temporarily():  # the offsets are real tensors, whatever mode the compiler runs in
                removed = sum(_rows_in_storage_order(graph, rows) for rows in _reordered_rows(graph))
            if removed:
                reshaped |= _retrace(work)
            with unset_fake_temporarily():
                skipped = sum(_attention_reads_views(graph, clone) for clone in _reordering_clones(graph))
            if skipped:
                reshaped |= _retrace(work)
            if not removed + skipped:
                break
    finally:
        release_offsets()
        _rows_of.cache_clear()
        _leaf_layouts.cache_clear()
    saved = clones - len(_reordering_clones(graph)) - len(reshaped & set(graph.nodes))
    if saved <= 0 or _returned_layouts(graph) != _returned_layouts(gm.graph):
        return 0
    gm.graph = graph
    return saved


#: Rounds of both rewrites at most: attention's input projection, its inputs, its output projection.
_ROUNDS = 3

#: How many times a :class:`Restrided` met a source laid out otherwise than traced and copied.
fallbacks = 0


@dataclass(frozen=True)
class Restrided:
    """``source`` viewed as ``layout`` when its own layout is ``traced``; otherwise
    ``fallback(source)``, which computes the same values from the source's logical elements
    (a copy). The graph calls it where a copy was (module docstring)."""

    traced: Layout
    layout: Layout
    fallback: Callable[[torch.Tensor], torch.Tensor]

    @property
    def __name__(self) -> str:  # FX names the node after its target
        return "restrided"

    def __call__(self, source: torch.Tensor) -> torch.Tensor:
        if (tuple(source.shape), source.stride(), source.storage_offset()) != self.traced:
            global fallbacks
            fallbacks += 1
            return self.fallback(source)
        shape, strides, offset = self.layout
        return source.as_strided(shape, strides, offset)


def _reordering_clones(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    """The clones whose result is contiguous and whose source is not: real reorderings."""
    found = []
    for node in graph.find_nodes(op="call_function", target=aten.clone.default):
        source = node.args[0] if node.args else None
        before, after = node_value(source), node_value(node)
        if before is not None and after is not None and after.is_contiguous() and not before.is_contiguous() \
                and dense_layout(before) is not None and not _returned(node):
            found.append(node)
    return found


def _returned_layouts(graph: torch.fx.Graph) -> list[Layout | None]:
    return [static_layout(value) if value is not None else None
            for value in map(node_value, graph.output_node().all_input_nodes)]


def _reordered_rows(graph: torch.fx.Graph) -> list[Rows]:
    """Each matrix of rows a copy reorders: ``view(clone(source))`` (the copy: the clone) and
    ``reshape(source)`` of a source it cannot view (the reshape copies)."""
    found = []
    for clone in _reordering_clones(graph):
        rows = only_user(clone)
        if rows is not None and rows.target in _ROW_VIEWS:
            found.append((rows, clone.args[0], (clone,)))
    for rows in graph.find_nodes(op="call_function", target=aten.reshape.default):
        source = node_value(rows.args[0])
        if source is not None and not source.is_contiguous() and dense_layout(source) is not None:
            found.append((rows, rows.args[0], ()))
    return found


def _rows_in_storage_order(graph: torch.fx.Graph, found: Rows) -> bool:
    """The first rewrite (module docstring) for one of :func:`_reordered_rows`, if its uses
    have that shape."""
    rows, source, copies = found
    if len(node_value(rows).shape) != 2 or _returned(rows):
        return False
    product = only_user(rows)
    if product is None or product.target not in (aten.mm.default, aten.addmm.default) or _returned(product):
        return False
    position = 1 if product.target is aten.addmm.default else 0
    if product.args[position] is not rows or rows in product.args[position + 1:] \
            or (position and not _is_row(node_value(product.args[0]), node_value(product))):
        return False  # an addmm's addend must be one row for all (a bias), or rows would need reordering too
    traced = dense_layout(node_value(source))
    m, k = node_value(rows).shape
    order = _rows_of(traced, m, k)
    result = only_user(product)
    if order is None or torch.equal(order, counting(m)) or result is None or result.target not in _ROW_VIEWS:
        return False
    n = node_value(product).shape[1]
    shape = tuple(node_value(result).shape)
    rows_affine = affine_layout(order.view(*shape[:-1])) if shape[-1] == n and len(shape) > 1 else None
    bias = _bias_after(result, n)
    last = bias if bias is not None else result
    if rows_affine is None or _returned(last):
        return False
    with graph.inserting_before(product):
        # strides are not negative: the first row starts at the storage offset
        stored = graph.call_function(Restrided(traced, ((m, k), (k, 1), traced[2]), _storage_rows(traced, m, k)),
                                     (source,))
        args = list(product.args)
        args[position] = stored
        new_product = graph.call_function(product.target, tuple(args), dict(product.kwargs))
    with graph.inserting_before(last):
        value = new_product
        if bias is not None:
            flat = graph.call_function(aten.view.default, (new_product, [m, n]))
            value = graph.call_function(aten.add.Tensor, (flat, bias.args[1]))
        row_strides, first = rows_affine
        layout = (shape, tuple(s * n for s in row_strides) + (1,), first * n)
        viewed = graph.call_function(Restrided(((m, n), (n, 1), 0), layout, _rows_reordered(order, shape)), (value,))
    last.replace_all_uses_with(viewed)
    for node in ((last,) if bias is not None else ()) + (result, product, rows, *copies):
        graph.erase_node(node)
    return True


def _attention_reads_views(graph: torch.fx.Graph, clone: torch.fx.Node) -> bool:
    """The second rewrite (module docstring) at ``clone``, if its uses have that shape."""
    tree, leaves = _view_tree(clone)
    if not leaves:
        return False
    source = clone.args[0]
    traced = dense_layout(node_value(source))
    position = {node: i for i, node in enumerate([clone, *tree])}
    steps = tuple((position[node.args[0]], node.target, _hashable(node.args[1:]), _hashable(node.kwargs))
                  for node in tree)
    found = _leaf_layouts(traced, steps, tuple(position[leaf] for leaf in leaves))
    if found is None:
        return False
    for leaf, layout in zip(leaves, found):
        with graph.inserting_before(leaf):
            view = graph.call_function(Restrided(traced, layout, _replayed(clone, tree, leaf)), (source,))
        for user in list(leaf.users):
            if user.target in _ATTENTION:
                user.replace_input_with(leaf, view)
    for node in reversed([clone, *tree]):
        if not node.users:
            graph.erase_node(node)
    return True


@functools.lru_cache(maxsize=64)  # a transformer's layers repeat one analysis
def _leaf_layouts(traced: Layout, steps: tuple[tuple[int, Any, Any, Any], ...], leaves: tuple[int, ...]) \
        -> tuple[Layout, ...] | None:
    """The layouts of the leaves of a view tree (``steps``: each node's parent position, op and
    other arguments; position 0 the clone) over a source of layout ``traced``, each a view with
    contiguous rows; None if some leaf is not one."""
    offsets = [storage_offsets(traced).contiguous()]
    for parent, target, args, kwargs in steps:
        offsets.append(target(offsets[parent], *_listed(args), **dict(_listed(kwargs))))
    layouts = []
    for leaf in leaves:
        found = affine_layout(offsets[leaf])
        if found is None or not _attention_can_read(tuple(offsets[leaf].shape), *found):
            return None
        layouts.append((tuple(offsets[leaf].shape), *found))
    return tuple(layouts)


def _attention_can_read(shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> bool:
    """Whether the fused attention kernels take a q, k or v of this layout as it is: contiguous
    rows, the other strides and the offset multiples of 8 elements (16 bytes in 16 bits)."""
    if shape[-1] > 1 and strides[-1] != 1:
        return False
    return offset % 8 == 0 and all(stride % 8 == 0 for size, stride in zip(shape[:-1], strides[:-1]) if size > 1)


def _hashable(value: Any) -> Any:
    """Lists as tuples and dicts as sorted item tuples, recursively (a cache key of op arguments)."""
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    return value


def _listed(value: tuple[Any, ...]) -> list[Any]:
    """:func:`_hashable`'s tuples back as lists (op arguments)."""
    return [_listed(v) if isinstance(v, tuple) else v for v in value]


def _view_tree(clone: torch.fx.Node) -> tuple[list[torch.fx.Node], list[torch.fx.Node]]:
    """The view nodes reached from ``clone`` (in graph order) and those read by attention's
    q, k or v; empty lists unless every use is one of those."""
    tree: list[torch.fx.Node] = []
    leaves: list[torch.fx.Node] = []
    pending = [clone]
    while pending:
        node = pending.pop()
        for user in node.users:
            if user.op == "call_function" and user.target in VIEWS and user.args[0] is node \
                    and not any(isinstance(a, torch.fx.Node) for a in (*user.args[1:], *user.kwargs.values())):
                tree.append(user)
                pending.append(user)
            elif user.op == "call_function" and user.target in _ATTENTION \
                    and node in user.args[:3] and node not in user.args[3:] and node is not clone:
                leaves.append(node)
            else:
                return [], []
    order = {node: i for i, node in enumerate(clone.graph.nodes)}
    if any(_returned(node) for node in tree):
        return [], []
    return sorted(tree, key=order.__getitem__), list(dict.fromkeys(leaves))


@functools.lru_cache(maxsize=64)
def _rows_of(layout: Layout, m: int, k: int) -> torch.Tensor | None:
    """Where each row of the (m, k) matrix read from a tensor of ``layout`` in logical order
    lies among the m rows memory holds: a permutation of range(m), if memory holds every
    row as k consecutive elements; None otherwise."""
    offsets = storage_offsets(layout).contiguous().view(m, k)
    if not torch.equal(offsets - offsets[:, :1], counting(k).expand(m, k)):
        return None
    starts = offsets[:, 0] - int(offsets.min())
    if bool((starts % k).any()):
        return None
    order = starts // k
    if not torch.equal(order.sort().values, counting(m)):
        return None
    return order


def _is_row(addend: torch.Tensor | None, product: torch.Tensor | None) -> bool:
    """Whether ``addend`` broadcasts one row to every row of ``product``."""
    return addend is not None and product is not None and addend.dim() <= 2 and addend.numel() == product.shape[-1]


def _bias_after(result: torch.fx.Node, n: int) -> torch.fx.Node | None:
    """``add(result, bias)`` when that is ``result``'s only use and ``bias`` a vector of n values."""
    add = only_user(result)
    if add is None or add.target is not aten.add.Tensor or add.args[0] is not result or len(add.args) != 2 \
            or add.kwargs:
        return None
    bias, value = node_value(add.args[1]), node_value(result)
    if bias is None or bias.dim() != 1 or bias.numel() != n or bias.dtype != value.dtype:
        return None
    return add


# -- the old computations, for sources laid out otherwise ---------------------------------------


def _storage_rows(traced: Layout, m: int, k: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """Rows of a tensor in the order the traced layout stores them, whatever its layout now."""
    shape, strides, _ = traced
    by_stride = sorted(range(len(shape)), key=lambda d: (-strides[d], d))
    return lambda source: source.permute(by_stride).contiguous().view(m, k)


def _rows_reordered(order: torch.Tensor, shape: Sequence[int]) -> Callable[[torch.Tensor], torch.Tensor]:
    """A product of rows in storage order put back in the graph's order, as a copy."""
    return lambda product: product.reshape(-1, product.shape[-1])[order.to(product.device)].view(*shape)


def _replayed(clone: torch.fx.Node, tree: Sequence[torch.fx.Node], leaf: torch.fx.Node) \
        -> Callable[[torch.Tensor], torch.Tensor]:
    """The graph's own computation of ``leaf`` from the clone's source."""
    chain: list[torch.fx.Node] = []
    node = leaf
    while node is not clone:
        chain.append(node)
        node = node.args[0]
    steps = [(node.target, node.args[1:], dict(node.kwargs)) for node in reversed(chain)]

    def compute(source: torch.Tensor) -> torch.Tensor:
        value = source.contiguous()
        for target, args, kwargs in steps:
            value = target(value, *args, **kwargs)
        return value

    return compute


# -- graph helpers ----------------------------------------------------------------------------------


def _returned(node: torch.fx.Node) -> bool:
    return any(user.op == "output" for user in node.users)


def _retrace(module: torch.fx.GraphModule) -> set[torch.fx.Node]:
    """Trace every node's ``meta["val"]`` again with fake tensors (layouts changed). A view
    of a value whose layout changed so that it no longer views becomes a reshape (a copy,
    which :func:`_rows_in_storage_order` may then remove); those nodes are returned."""
    from torch._guards import detect_fake_mode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    reshaped: set[torch.fx.Node] = set()

    class Retrace(FakeTensorProp):
        def run_node(self, node: torch.fx.Node) -> Any:
            try:
                return super().run_node(node)
            except (RuntimeError, ValueError):
                if node.target not in (aten.view.default, aten._unsafe_view.default):
                    raise
                node.target = aten.reshape.default
                reshaped.add(node)
                return super().run_node(node)

    placeholders = [node.meta.get("val") for node in module.graph.find_nodes(op="placeholder")]
    mode = detect_fake_mode(placeholders)
    if mode is None:
        raise ValueError("the graph's inputs carry no fake tensors to trace layouts with")
    module.recompile()
    Retrace(module, mode).propagate_dont_convert_inputs(*placeholders)
    module.recompile()
    return reshaped
