"""In inference, a batch norm after a convolution folded into it (a ``GraphRewrite``).

``y = conv(x, w, b) * s + (beta - mean * s)`` with ``s = gamma / sqrt(var + eps)`` per output
channel is ``conv(x, w * s, (b - mean) * s + beta)``. Both new tensors are themselves
inference batch norms: of the weight seen as ``(1, K, rest)`` (output channels as the
normalized ones) with a zero mean, and of the bias seen as ``(1, K)`` (zeros where the conv has
none), each computed in float32 and rounded once. So the rewrite adds two small kernels per
convolution (the batch norms, left to the nested backend: no pattern is offered them), not
a dozen elementwise ones, and one vector of zeros per channel count for the whole graph: on
a GPU each costs a launch per step, and its host time where the nested backend is eager. It
replaces the convolution and the batch norm by one ``aten.convolution`` with a bias, which
the conv plugin's pattern then takes, with the activation that follows, as one kernel. The
weight keeps its memory format (channels-last stays channels-last, which kernel libraries
key on). This plugin knows only the aten ops: nothing of the conv plugin.
"""

from __future__ import annotations

import operator

import torch
import torch.fx

from boo_core import GraphRewrite, insert_aten, node_arguments

aten = torch.ops.aten


def _memory_order(value: torch.Tensor) -> list[int] | None:
    """The weight's dimensions from outermost to innermost in memory, output channels first,
    or None where its layout is not a dense permutation with them outermost."""
    order = sorted(range(value.dim()), key=lambda d: (-value.stride(d), d))
    expected = 1
    for d in reversed(order):
        if value.shape[d] != 1 and value.stride(d) != expected:
            return None
        expected *= value.shape[d]
    return order if order[0] == 0 else None


#: ``meta`` key of the zeros a graph's folds share: (channels, dtype, device).
_ZEROS = "boo_bnorm_fold_zeros"


def _shared_zeros(graph: torch.fx.Graph, channels: int, dtype: torch.dtype, device: torch.device) -> torch.fx.Node:
    """The graph's one vector of ``channels`` zeros of this dtype and device, made at its start
    (a call of the graph makes it once, not once per convolution: each is a launch)."""
    key = (channels, dtype, device)
    for existing in graph.nodes:
        if existing.meta.get(_ZEROS) == key:
            return existing
    with graph.inserting_before(next(n for n in graph.nodes if n.op != "placeholder")):
        zeros = insert_aten(graph, aten.full.default, [channels], 0.0, dtype=dtype, device=device, pin_memory=False)
    zeros.meta[_ZEROS] = key
    return zeros


class FoldIntoConvolution(GraphRewrite):
    """``aten._native_batch_norm_legit_no_training`` of an ``aten.convolution`` used by
    nothing else, where only the normalized output is used: one convolution with a bias."""

    name = "bnorm.fold_into_conv"
    anchors = (aten._native_batch_norm_legit_no_training.default,)

    def apply(self, node: torch.fx.Node) -> bool:
        x, gamma, beta, mean, var, _, eps = node.args[:7]
        conv = x if isinstance(x, torch.fx.Node) else None
        if conv is None or conv.target is not aten.convolution.default or len(conv.users) != 1:
            return False
        outputs = list(node.users)
        if not all(u.target is operator.getitem and u.args[1] == 0 for u in outputs):
            return False  # the (empty) statistics are used: leave the node as it is
        options = node_arguments(conv)
        if options["transposed"]:
            return False  # a transposed weight holds output channels in dim 1
        weight, bias = options["weight"], options["bias"]
        value = weight.meta["val"]
        params = {t.meta["val"].dtype for t in (gamma, beta, mean, var) if t is not None}
        if len(params) != 1 or not params <= {value.dtype, torch.float32}:
            return False  # batch norm's kernels take a 16-bit input with float32 parameters, not other mixes
        order = _memory_order(value)
        if order is None:
            return False
        channels = value.shape[0]
        graph = node.graph

        def normalized(t: torch.fx.Node, weight_: object, bias_: object, mean_: torch.fx.Node) -> torch.fx.Node:
            # nested: the folding's own batch norms run on the nested backend, no pattern takes them
            out = insert_aten(graph, aten._native_batch_norm_legit_no_training.default, t, weight_, bias_, mean_,
                              var, 0.0, float(eps), nested=True)
            return insert_aten(graph, operator.getitem, out, 0)

        stats = mean.meta["val"]
        zeros = _shared_zeros(graph, channels, stats.dtype, stats.device)
        identity = order == sorted(order)
        with graph.inserting_before(node):
            # w * s: the weight as (1, K, rest) in its memory order, normalized with a zero mean
            stored = weight if identity else insert_aten(graph, aten.permute.default, weight, order)
            stored_shape = list(stored.meta["val"].shape)
            flat = insert_aten(graph, aten.view.default, stored, [1, channels, -1])
            folded = insert_aten(graph, aten.view.default, normalized(flat, gamma, None, zeros), stored_shape)
            if not identity:
                folded = insert_aten(graph, aten.permute.default, folded, [order.index(d) for d in range(len(order))])
            # (b - mean) * s + beta
            start = insert_aten(graph, aten.view.default, zeros if bias is None else bias, [1, channels])
            shift = insert_aten(graph, aten.view.default, normalized(start, gamma, beta, mean), [channels])
            if shift.meta["val"].dtype != value.dtype:
                shift = insert_aten(graph, torch.ops.prims.convert_element_type.default, shift, value.dtype)
            args = [options[name] for name in ("input", "weight", "bias", "stride", "padding", "dilation",
                                               "transposed", "output_padding", "groups")]
            args[1], args[2] = folded, shift
            fused = insert_aten(graph, aten.convolution.default, *args)
        for user in outputs:
            user.replace_all_uses_with(fused)
            graph.erase_node(user)
        graph.erase_node(node)
        graph.erase_node(conv)
        return True
