"""The graph pass of the torch.compile backends: matched subgraphs become BOO kernel calls."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import logging
import operator
import os
import warnings
from collections.abc import Callable, Collection, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import torch
import torch.fx

from ..errors import BooFallbackWarning, describe_error, is_plugins_failure
from ..plugins.patterns import (
    NESTED,
    Decline,
    FusionMatch,
    FusionPattern,
    GraphRewrite,
    has_static_shape,
    only_user,
    read_before,
    tensor_value,
)
from ..plugins.registry import BooOpRegistry
from ..runtime.launchable import EmptyLaunchable, ReferenceLaunchable
from ..runtime.lookup import get_launchable
from ..settings import get_settings
from ..signatures.signature import Signature
from . import custom_op  # noqa: F401  (registers torch.ops.boo.fused)
from .autotune import torch_is_faster, tuned_torch_is_faster
from .column_sums import column_sums_as_products
from .copies import batch_final_writes, drop_noop_clones, update_in_place
from .copy_chains import collapse_copy_chains
from .flops import node_flops
from .gradient_sums import stack_selection_gradients
from .kernel_call import KernelCall, TensorMeta, raise_unless_absorbed
from .reorders import skip_reordering_copies
from .report import GraphReport, logger, new_report
from .sum_layouts import keep_sums_contiguous

T = TypeVar("T")

_module_logger = logging.getLogger(__name__)

class CollectedSignatures(dict):
    """``func_name`` -> signature, in the order first met; ``calls[func_name]``: how many
    kernel calls of the compiled graphs launch it (once per matched node that does)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: collections.Counter[str] = collections.Counter()

    def record(self, signature: Signature) -> None:
        self.setdefault(signature.func_name, signature)
        self.calls[signature.func_name] += 1


#: Open :func:`collecting_signatures` blocks' records, the innermost last.
_collectors: list[CollectedSignatures] = []


@contextlib.contextmanager
def collecting_signatures() -> Iterator[CollectedSignatures]:
    """While open, :func:`rewrite` builds no kernel and replaces no node: it records the
    signatures each graph's matches would launch (by ``func_name``, in the order first met,
    with how many calls launch each) into what this yields. Graphs compiled meanwhile keep
    their ops and run them on the nested backend. Every graph compiled in the process
    records, whatever its thread (the backward graph compiles on autograd's); open one
    block at a time."""
    found = CollectedSignatures()
    _collectors.append(found)
    try:
        yield found
    finally:
        _collectors.remove(found)


def saved_for_backward(gm: torch.fx.GraphModule) -> range:
    """The positions of the outputs of ``gm``, the forward graph being compiled, that only its
    backward reads (AOTAutograd's saved activations); none where AOTAutograd does not say."""
    from torch._guards import TracingContext

    context = TracingContext.try_get()
    outputs = gm.graph.output_node().args[0]
    try:
        saved = context.fw_metadata.tensors_saved_for_backwards_slice  # type: ignore[union-attr]
    except (AttributeError, AssertionError):
        return range(0)
    return range(*saved.indices(len(outputs))) if isinstance(outputs, (list, tuple)) else range(0)


#: Joint rewrites applied to the training graph being compiled, which its forward's report
#: takes over (AOTAutograd partitions the joint graph, then compiles its forward, in one thread).
_joint_rewritten: collections.Counter[str] = collections.Counter()


def rewrite_joint(graph: torch.fx.Graph) -> bool:
    """Apply the plugins' joint rewrites (``GraphRewrite.graph == "joint"``) to a training
    step's joint forward and backward graph, in place, before it is partitioned, unless
    ``BOO_GRAPH_REWRITES=0``; whether any applied. They change what the forward saves, not
    what it computes."""
    if not get_settings().rewrites_joint_graphs():
        return False
    report = GraphReport(backend="", kind="joint", index=-1)
    _apply_rewrites(graph, BooOpRegistry.default().graph_rewrites("joint"), report)
    if report.rewritten:
        graph.lint()
        _joint_rewritten.update(report.rewritten)
    return bool(report.rewritten)


#: Sums the last joint graph's partition kept contiguous, for its forward graph's report.
_joint_contiguous_sums = 0


def keep_joint_sums_contiguous(graph: torch.fx.Graph) -> bool:
    """:func:`.sum_layouts.keep_sums_contiguous` on a training step's joint graph (an eager
    nested backend's partition); whether any sum changed layout."""
    global _joint_contiguous_sums
    _joint_contiguous_sums = keep_sums_contiguous(graph)
    return _joint_contiguous_sums > 0


def rewrite(gm: torch.fx.GraphModule, *, backend: str, kind: str, as_custom_op: bool,
            autotune: bool = False) -> GraphReport:
    """Replace every node the plugins' patterns match with a BOO kernel call, in place.
    A forward or inference graph first loses its clones that copy nothing (:mod:`.copies`)
    and, for an eager nested backend, the copies matmuls and attention can do without
    (:mod:`.reorders`; Inductor fuses copies itself, and its graphs hold only ops) and, in
    inference, the layouts residual sums need not take (:mod:`.sum_layouts`); for an
    eager nested backend, a sum of selections' gradients that fill a tensor becomes one
    stack (:mod:`.gradient_sums`), a chain of copies one copy (:mod:`.copy_chains`), and a
    16-bit GPU tensor's sum over its leading dims a product with ones (:mod:`.column_sums`).

    Kernels are compiled here, before the graph runs; one that fails to compile leaves its
    nodes to the nested backend with a warning (an error under ``BOO_COMPILE_STRICT=1``).
    Backward graphs are left alone unless ``BOO_USE_BACKWARD_KERNELS=1`` or ``autotune``.
    ``as_custom_op`` writes the calls as ``torch.ops.boo.fused`` (for compilers that trace
    the graph again) instead of plain Python callables. ``autotune`` (``mode="max-autotune"``)
    times each node against torch's kernel and leaves it to the nested backend where torch's
    is faster (:mod:`.autotune`); it offers the backward graph's gradients too, each kept on
    BOO only where its kernel is not slower.
    """
    report = new_report(backend, kind)
    if kind == "forward":
        global _joint_contiguous_sums
        report.rewritten.update(_joint_rewritten)
        _joint_rewritten.clear()
        report.contiguous_sums, _joint_contiguous_sums = _joint_contiguous_sums, 0
        report.saved_for_backward = len(saved_for_backward(gm))
    patterns = BooOpRegistry.default().fusion_patterns()
    if kind == "backward" and not autotune:
        patterns = _backward_patterns(patterns, report, _device_type(gm.graph))
    by_anchor = _by_anchor(patterns)
    if not as_custom_op:  # Inductor fuses the sum into one kernel itself
        report.stacked_gradients = stack_selection_gradients(gm.graph)
    if kind == "inference" and not as_custom_op:
        report.contiguous_sums = keep_sums_contiguous(gm.graph)
    if kind != "backward":
        if not as_custom_op:
            report.skipped_reorders = skip_reordering_copies(gm)
        report.dropped_copies = drop_noop_clones(gm.graph)
        if not as_custom_op:  # Inductor fuses the updates and their copies itself
            report.updates_in_place = update_in_place(gm.graph)
            report.batched_writes = batch_final_writes(gm.graph)
    if not as_custom_op:  # Inductor fuses copies itself
        report.collapsed_copies = collapse_copy_chains(gm.graph)
    if kind != "backward" and get_settings().rewrites_graphs(_device_type(gm.graph)):
        _apply_rewrites(gm.graph, BooOpRegistry.default().graph_rewrites(), report,
                        spanned=_spanned(gm.graph, by_anchor, backend, kind))
    taken: set[torch.fx.Node] = set()
    claims = _claims(gm.graph, by_anchor, taken, report)
    # Kernels compile in parallel (iree-compile runs as a process of its own); a match whose
    # kernels fail leaves its node to the next pattern that matches it, if any.
    signatures = [_signatures_ahead(pattern, match, report) for _, _, pattern, match in claims]
    if _collectors:
        for signature in (s for found in signatures for s in found or ()):
            _collectors[-1].record(signature)
        gm.graph.lint()
        gm.recompile()
        return report
    # Where `boo tune` timed torch's kernel faster, the node stays with the nested backend and
    # its kernels are not built.
    tuned_out = [_tuned_out(pattern, match, found, report) for (_, _, pattern, match), found in zip(claims, signatures)]
    with ThreadPoolExecutor(max_workers=max(1, min(len(claims), os.cpu_count() or 1))) as pool:
        compiled = list(pool.map(lambda claim, found, out: not out and _compile_ahead(claim[2], claim[3], found,
                                                                                       report),
                                 claims, signatures, tuned_out))
    replaced: dict[torch.fx.Node, torch.fx.Node] = {}
    for (node, index, pattern, match), ok, why in zip(claims, compiled, tuned_out):
        if why:
            _refuse(report, node, why)
            continue
        while not ok:
            taken.difference_update(_claimed(match))
            claim = _first_match(by_anchor[node.target], index + 1, node, taken, report)
            if claim is None:
                break
            index, pattern, match = claim
            taken.update(_claimed(match))
            ok = _compile_ahead(pattern, match, _signatures_ahead(pattern, match, report), report)
        if ok:
            # An input may be the root of a match replaced before this one: read its replacement.
            match = dataclasses.replace(match, inputs=tuple(replaced.get(n, n) for n in match.inputs))
            items = dict(zip(match.applied, _applied_items(match)))  # what reads their values after
            spliced = _offload(gm.graph, node, pattern, match, as_custom_op, autotune, report)
            if spliced is not None:
                replaced[match.root], exposed = spliced
                replaced.update(items)
                replaced.update(zip(match.exposed, exposed))
    for node in gm.graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) \
                and node.target.namespace != "boo":
            report.fallbacks[_op_name(node.target)] += 1
            flops = node_flops(node)
            if flops:
                report.nested_flops[_op_name(node.target)] += flops
    if not as_custom_op:  # after the patterns (none may take the product); Inductor fuses sums itself
        report.column_sums = column_sums_as_products(gm.graph)
    gm.graph.lint()
    gm.recompile()
    logger.info("%s", report.line())
    return report


def _backward_patterns(patterns: Sequence[FusionPattern], report: GraphReport,
                       device_type: str) -> list[FusionPattern]:
    """The patterns of the ops whose gradients ``BOO_USE_BACKWARD_KERNELS`` puts on BOO's
    kernels for a graph on ``device_type`` (a pattern's op is its name's prefix:
    ``bnorm.backward``); the report says which ops' nodes are left to the nested backend."""
    setting = get_settings().use_backward_kernels
    value = int(setting) if isinstance(setting, bool) else ",".join(sorted(setting)) if isinstance(
        setting, frozenset) else setting
    named = f"BOO_USE_BACKWARD_KERNELS={value}"
    choice = get_settings().backward_ops(device_type)
    if choice is True:
        return list(patterns)
    if choice is False:
        report.note = f"backward graph left to the nested backend ({named} on {device_type})"
        return []
    report.note = f"backward graph on BOO's kernels for {', '.join(sorted(choice))} only ({named} on {device_type})"
    return [p for p in patterns if BooOpRegistry.backward_kernels_for(p.name.split(".")[0], device_type)]


def _device_type(graph: torch.fx.Graph) -> str:
    """The device type of a graph's first tensor input ("cpu" where it has none)."""
    for node in graph.find_nodes(op="placeholder"):
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor):
            return value.device.type
    return "cpu"


def _spanned(graph: torch.fx.Graph, by_anchor: dict[object, list[FusionPattern]], backend: str,
             kind: str) -> set[torch.fx.Node]:
    """The nodes some pattern would take, as the graph stands, in a match anchored at
    another node (a batch norm inside conv + batch norm + activation): no rewrite applies
    there, since one kernel for the whole match beats rewriting a part of it."""
    claims = _claims(graph, by_anchor, set(), new_report(backend, kind))  # a dry run: its refusals are not reported
    return {n for anchor, _, _, match in claims for n in match.nodes if n is not anchor}


def _apply_rewrites(graph: torch.fx.Graph, rewrites: Sequence[GraphRewrite], report: GraphReport,
                    spanned: Collection[torch.fx.Node] = ()) -> None:
    """Run the plugins' graph rewrites at every node of their anchor ops, in graph order,
    but those in ``spanned``; the first that applies at a node wins. One that raises is
    skipped there with a warning (an error under BOO_COMPILE_STRICT=1): a rewrite builds its
    new nodes before it replaces any use, so what it left behind is unused."""
    by_anchor = _by_anchor(rewrites)
    for node in list(graph.nodes):
        if node in spanned:
            continue
        for rewrite in by_anchor.get(node.target, []) if node.op == "call_function" else []:
            try:
                done = rewrite.apply(node)
            except Exception as e:
                raise_unless_absorbed(e, rewrite)
                warnings.warn(f"BOO's graph rewrite {rewrite.name} failed ({describe_error(e)}); the graph is "
                              "compiled without it", BooFallbackWarning, stacklevel=2)
                done = False
            if done:
                report.rewritten[rewrite.name] += 1
                break


A = TypeVar("A", FusionPattern, GraphRewrite)


def _by_anchor(items: Sequence[A]) -> dict[object, list[A]]:
    """Patterns (or rewrites) by each aten op they anchor on, in their order."""
    by_anchor: dict[object, list[A]] = {}
    for item in items:
        for anchor in item.anchors:
            by_anchor.setdefault(anchor, []).append(item)
    return by_anchor


def _op_name(target: torch._ops.OpOverload) -> str:
    return f"{target.namespace}.{target._opname}"


Claim = tuple[torch.fx.Node, int, FusionPattern, FusionMatch]
"""A node some pattern matched at: (anchor node, the pattern's index among its anchor's, pattern, match)."""


def _claims(graph: torch.fx.Graph, by_anchor: dict[object, list[FusionPattern]], taken: set[torch.fx.Node],
            report: GraphReport) -> list[Claim]:
    """The first match at every anchor node, in graph order; their nodes go into ``taken``."""
    claims: list[Claim] = []
    for node in list(graph.nodes):
        if node.op == "call_function" and node not in taken and not node.meta.get(NESTED):
            claim = _first_match(by_anchor.get(node.target, []), 0, node, taken, report)
            if claim is not None:
                claims.append((node, *claim))
                taken.update(_claimed(claim[2]))
    return claims


def _claimed(match: FusionMatch) -> tuple[torch.fx.Node, ...]:
    """The nodes a match takes from the graph: its own and those it applies to the root's values."""
    return (*match.nodes, *match.applied)


def _offload(graph: torch.fx.Graph, anchor: torch.fx.Node, pattern: FusionPattern, match: FusionMatch,
             as_custom_op: bool, autotune: bool,
             report: GraphReport) -> tuple[torch.fx.Node, list[torch.fx.Node]] | None:
    """Replace a compiled match by its kernel call (unless autotune finds torch's kernel
    faster: the reason is recorded under the anchor's op, the one the summary counts as left);
    the node now holding the root's value and those holding the exposed nodes' values, or
    None when the match stays."""
    call, payload = _bound_call(pattern, match, as_custom_op)
    slower = autotune and torch_is_faster(call, payload, [n.meta["val"] for n in match.inputs])
    if slower:
        _refuse(report, anchor, slower)
        return None
    report.boo_flops += sum(node_flops(n) for n in match.nodes)
    report.offloaded[pattern.name] += 1
    return _splice(graph, pattern, match, call, payload, as_custom_op)


def _first_match(patterns: Sequence[FusionPattern], start: int, node: torch.fx.Node, taken: set[torch.fx.Node],
                 report: GraphReport) -> tuple[int, FusionPattern, FusionMatch] | None:
    """The first of ``patterns[start:]`` that matches at ``node``, with its index and match."""
    for index in range(start, len(patterns)):
        match = _match(patterns[index], node, taken, report)
        if match is not None:
            return index, patterns[index], match
    return None


def _match(pattern: FusionPattern, node: torch.fx.Node, taken: set[torch.fx.Node],
           report: GraphReport) -> FusionMatch | None:
    """The pattern's match at ``node`` if it is one BOO can use; a pattern that raises or
    returns something malformed is refused for this node (a plugin's bug must not break the
    user's compile)."""
    try:
        match = pattern.match(node)
        if match is None:
            return None
        if isinstance(match, Decline):
            problem = f"pattern {pattern.name} declined: {match.reason}"
        elif not isinstance(match, FusionMatch):
            problem = f"pattern {pattern.name} returned {type(match).__name__}, not a FusionMatch"
        else:
            problem = _problem(pattern, match, node.graph, taken)
    except BaseException as e:  # sys.exit() included: the pattern's failure; an interrupt is the user's
        if not is_plugins_failure(e):
            raise
        problem = f"pattern {pattern.name} failed to match: {describe_error(e)}"
    if problem:
        _refuse(report, node, problem)
        return None
    return match


def _problem(pattern: FusionPattern, match: FusionMatch, graph: torch.fx.Graph, taken: set[torch.fx.Node]) -> str:
    """Why ``match`` cannot be replaced by a kernel call ("" if it can)."""
    nodes, inputs = match.nodes, match.inputs
    if not isinstance(nodes, tuple) or not nodes or not isinstance(inputs, tuple) or not all(
            isinstance(n, torch.fx.Node) and n.graph is graph for n in (*nodes, *inputs)):
        return f"pattern {pattern.name} matched something other than nodes of this graph"
    try:
        json.dumps(match.spec, allow_nan=False)
    except (TypeError, ValueError) as e:
        return f"pattern {pattern.name} gave a spec that is not JSON-able ({e})"
    inner = set(nodes[:-1])
    if taken.intersection(_claimed(match)):
        return "overlaps another BOO kernel"
    if not _applied_to_root_values(match):
        return (f"pattern {pattern.name} gave as applied a node that is not a function of one of the root's values "
                "(and of inputs made before the root)")
    exposed = match.exposed
    if not isinstance(exposed, tuple) or not set(exposed) <= inner or len(set(exposed)) != len(exposed) or (
            exposed and isinstance(match.root.meta.get("val"), torch.Tensor)):
        return f"pattern {pattern.name} exposed nodes that are not inner nodes of a match whose root is a tuple"
    if any(user not in nodes for n in inner - set(exposed) for user in n.users):
        return f"pattern {pattern.name} matched nodes whose values are used elsewhere"
    if exposed and read_before(match.root, {user for n in exposed for user in n.users} - set(nodes)):
        return f"pattern {pattern.name} exposed a value the graph reads before the kernel runs"
    if not isinstance(match.root.meta.get("val"), torch.Tensor) and not all(
            user.target is operator.getitem for user in match.root.users):
        return f"pattern {pattern.name} matched a tuple value used other than by indexing"
    if not all(has_static_shape(n) for n in inputs) or not _static_value(match.root):
        return "dynamic shapes (BOO kernels are static-shaped: compile with dynamic=False)"
    return ""


def _applied_to_root_values(match: FusionMatch) -> bool:
    """Whether ``match.applied`` is what :class:`FusionMatch` allows: each node the only user
    of its source, a ``getitem(root, i)`` or an earlier applied node, of the source's shape,
    its other node arguments inputs of the match made before the root."""
    applied = match.applied
    if not isinstance(applied, tuple) or not all(isinstance(n, torch.fx.Node) for n in applied):
        return False
    inputs, sources = set(match.inputs), set()
    for position, node in enumerate(applied):
        source = _source(match, node, applied[:position])
        if source is None or only_user(source) is not node or source in sources:
            return False
        others = [n for n in node.all_input_nodes if n is not source]
        value, before = tensor_value(node), tensor_value(source)
        if any(n not in inputs or not n < match.root for n in others) or value is None or before is None \
                or value.shape != before.shape:
            return False
        sources.add(source)
    return True


def _source(match: FusionMatch, node: torch.fx.Node, earlier: Sequence[torch.fx.Node]) -> torch.fx.Node | None:
    """The one argument of an applied ``node`` that is a ``getitem(root, i)`` or one of the
    ``earlier`` applied nodes; None where there is not exactly one."""
    found = [n for n in node.all_input_nodes
             if n in earlier or (n.target is operator.getitem and n.args[0] is match.root)]
    return found[0] if len(found) == 1 and node.op == "call_function" else None


def _applied_items(match: FusionMatch) -> list[torch.fx.Node]:
    """For each applied node, the ``getitem(root, i)`` its chain starts from."""
    items: dict[torch.fx.Node, torch.fx.Node] = {}
    for position, node in enumerate(match.applied):
        source = _source(match, node, match.applied[:position])
        items[node] = items.get(source, source)
    return [items[node] for node in match.applied]


def _static_value(node: torch.fx.Node) -> bool:
    value = node.meta.get("val")
    values = value if isinstance(value, (tuple, list)) else (value,)
    return all(v is None or (isinstance(v, torch.Tensor) and all(isinstance(d, int) for d in (*v.shape, *v.stride())))
               for v in values)


def _signatures_ahead(pattern: FusionPattern, match: FusionMatch, report: GraphReport) -> list[Signature] | None:
    """The signatures the match will launch (read from its fake tensors: on the compiling
    thread, since fake tensors are not thread-safe); None if the pattern fails."""
    inputs = [n.meta["val"] for n in match.inputs]
    return _guarded(pattern, match, report, lambda: list(pattern.signatures(match.spec, inputs)))


def _tuned_out(pattern: FusionPattern, match: FusionMatch, signatures: list[Signature] | None,
               report: GraphReport) -> str:
    """Why the tuning records leave the match to torch's kernel ("" when they do not)."""
    if not signatures:
        return ""
    device = match.inputs[0].meta["val"].device
    return _guarded(pattern, match, report, lambda: tuned_torch_is_faster(signatures, device)) or ""


def _compile_ahead(pattern: FusionPattern, match: FusionMatch, signatures: list[Signature] | None,
                   report: GraphReport) -> bool:
    """Build (or load) and verify the match's kernels; whether they can serve it. Runs on
    worker threads: it touches signatures, never the graph's fake tensors."""
    if signatures is None:
        return False
    device = match.inputs[0].meta["val"].device

    def build() -> bool:
        for signature in signatures:
            launchable = get_launchable(signature, device)
            if isinstance(launchable, ReferenceLaunchable) and not isinstance(launchable, EmptyLaunchable):
                # Every formulation failed verification here: a BOO node would only run PyTorch.
                _refuse(report, match.root, f"no BOO kernel for {signature.func_name} passed verification on "
                                            f"{launchable.device.key}")
                return False
            if launchable.substitution is not None:
                report.substituted[signature.func_name] = launchable.substitution.label
        return True

    return bool(_guarded(pattern, match, report, build))


def _guarded(pattern: FusionPattern, match: FusionMatch, report: GraphReport, work: Callable[[], T]) -> T | None:
    """``work()``, or None with a warning and the reason recorded when it fails (a BooError, or
    the pattern's bug: PyTorch then computes these nodes); raised under BOO_COMPILE_STRICT=1."""
    try:
        return work()
    except BaseException as e:  # sys.exit() too; an interrupt is the user's
        raise_unless_absorbed(e, pattern)
        said = str(e) if isinstance(e, Exception) else describe_error(e)
        warnings.warn(f"BOO cannot take {pattern.name} here ({said}); it runs on the nested backend",
                      BooFallbackWarning, stacklevel=3)
        _refuse(report, match.root, describe_error(e))
        return None


def _refuse(report: GraphReport, node: torch.fx.Node, reason: str) -> None:
    name = _op_name(node.target) if isinstance(node.target, torch._ops.OpOverload) else str(node.target)
    report.reasons.setdefault(name, reason)
    _module_logger.debug("not offloading %s: %s", node.format_node(), reason)


def _root_values(match: FusionMatch) -> tuple[object, bool, Sequence[object]]:
    """The value the kernel call gives in the root's place (the root's compile-time value,
    with those of the nodes it applies in their items' places), whether it is one tensor, and
    its values as a sequence."""
    value = match.root.meta["val"]
    single = isinstance(value, torch.Tensor)
    if single:
        return value, single, (value,)
    values = list(value)
    for node, item in zip(match.applied, _applied_items(match)):  # a chain's last node gives the value
        values[item.args[1]] = node.meta["val"]
    values += [node.meta["val"] for node in match.exposed]
    return type(value)(values), single, tuple(values)


def _bound_call(pattern: FusionPattern, match: FusionMatch, as_custom_op: bool) -> tuple[KernelCall, str]:
    """The match's kernel call, bound to its inputs' metadata, and its payload."""
    _, single, values = _root_values(match)
    inputs = [n.meta["val"] for n in match.inputs]
    call = KernelCall(pattern, match.spec, [TensorMeta.of(v) for v in values], single,
                      [TensorMeta.of(v) for v in inputs])
    payload = call.payload()
    if as_custom_op:
        call = custom_op.kernel_call(pattern.name, payload)
    if not call.bind(inputs):
        _module_logger.debug("%s: not bound ahead; every call goes through the pattern's launch", pattern.name)
    return call, payload


def _splice(graph: torch.fx.Graph, pattern: FusionPattern, match: FusionMatch, call: KernelCall, payload: str,
            as_custom_op: bool) -> tuple[torch.fx.Node, list[torch.fx.Node]]:
    """Put the kernel call in place of the match; the node that now holds the root's value,
    and those that hold the exposed nodes' values."""
    root = match.root
    value, single, values = _root_values(match)
    items = _applied_items(match)  # before the root's uses move to the call
    with graph.inserting_before(root):
        if not as_custom_op:
            new = graph.call_function(call, tuple(match.inputs))
            new.meta["val"] = value
            root.replace_all_uses_with(new)
            holder = new
        else:
            new = graph.call_function(torch.ops.boo.fused.default, (pattern.name, payload, list(match.inputs)))
            tensors = [v for v in values if v is not None]
            new.meta["val"] = tensors
            position = {i: k for k, i in enumerate(i for i, v in enumerate(values) if v is not None)}
            if single:
                item = graph.call_function(operator.getitem, (new, 0))
                item.meta["val"] = value
                root.replace_all_uses_with(item)
                holder = item
            else:
                holder = new
                for user in list(root.users):  # getitem(root, i) -> getitem(new, position[i])
                    user.args = (new, position[user.args[1]])
    for node, item in zip(match.applied, items):  # its getitem now reads the value from the kernel call
        item.meta["val"] = node.meta["val"]
        node.replace_all_uses_with(item)
        graph.erase_node(node)
    exposed = _expose(graph, match, new, values, as_custom_op)
    for node in reversed(match.nodes):
        graph.erase_node(node)
    return holder, exposed


def _expose(graph: torch.fx.Graph, match: FusionMatch, call: torch.fx.Node, values: Sequence[object],
            as_custom_op: bool) -> list[torch.fx.Node]:
    """Each exposed node's uses moved to the kernel call's item holding its value (after
    the root's own); the new item nodes."""
    if as_custom_op:  # the op returns the values that are tensors, in order
        positions = {i: k for k, i in enumerate(i for i, v in enumerate(values) if v is not None)}
    else:
        positions = {i: i for i in range(len(values))}
    first = len(values) - len(match.exposed)
    items = []
    with graph.inserting_after(call):
        for offset, node in enumerate(match.exposed):
            item = graph.call_function(operator.getitem, (call, positions[first + offset]))
            item.meta["val"] = node.meta["val"]
            node.replace_all_uses_with(item, delete_user_cb=lambda user: user not in match.nodes)
            items.append(item)
    return items
