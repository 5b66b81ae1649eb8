"""In inference, a batch norm after a convolution folded into it (a ``GraphRewrite``).

``y = conv(x, w, b) * s + (beta - mean * s)`` with ``s = gamma / sqrt(var + eps)`` per output
channel is ``conv(x, w * s, (b - mean) * s + beta)``. The rewrite computes the new weight and
bias with aten ops in the graph (in float32, then rounded once to the weight's dtype) and
replaces the convolution and the batch norm by one ``aten.convolution`` with a bias, which
the conv plugin's pattern then takes, with the activation that follows, as one kernel. This
plugin knows only the aten ops: nothing of the conv plugin.
"""

from __future__ import annotations

import operator

import torch
import torch.fx

from boo_core import GraphRewrite, insert_aten, node_arguments

aten = torch.ops.aten
convert = torch.ops.prims.convert_element_type.default


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
        stats = torch.promote_types(value.dtype, torch.float32)
        channels = value.shape[0]
        graph = node.graph
        with graph.inserting_before(node):
            def f32(t: torch.fx.Node) -> torch.fx.Node:
                return t if t.meta["val"].dtype == stats else insert_aten(graph, convert, t, stats)

            # s = gamma / sqrt(var + eps) (gamma 1 and beta 0 where the norm has none)
            scale = insert_aten(graph, aten.rsqrt.default, insert_aten(graph, aten.add.Scalar, f32(var), float(eps)))
            if gamma is not None:
                scale = insert_aten(graph, aten.mul.Tensor, scale, f32(gamma))
            shape = [channels] + [1] * (value.dim() - 1)
            folded = insert_aten(graph, aten.mul.Tensor, f32(weight), insert_aten(graph, aten.view.default, scale,
                                                                                  shape))
            folded = folded if value.dtype == stats else insert_aten(graph, convert, folded, value.dtype)
            shift = insert_aten(graph, aten.neg.default, f32(mean)) if bias is None else \
                insert_aten(graph, aten.sub.Tensor, f32(bias), f32(mean))
            shift = insert_aten(graph, aten.mul.Tensor, shift, scale)
            if beta is not None:
                shift = insert_aten(graph, aten.add.Tensor, shift, f32(beta))
            shift = shift if value.dtype == stats else insert_aten(graph, convert, shift, value.dtype)
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
