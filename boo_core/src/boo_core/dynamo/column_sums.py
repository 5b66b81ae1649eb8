"""Sums over a 16-bit tensor's leading dims made a product with a vector of ones, on the GPU.

A linear layer's bias gradient is ``dY.sum(0)`` (``dY.sum((0, 1))`` for batched tokens):
summing a contiguous M×N tensor down its columns. torch's reduction kernel does that at
0.3–1.8 TB/s on an H200 (a ViT-B/16 training step: 50 such sums, about 0.9 ms), where cuBLAS's
``ones(1, M) @ dY`` reads the same bytes 1.3–3.6 times faster (docs/gpu.md), with the same
float32 accumulation and one rounding to the tensor's type (cuBLAS may reduce split parts
in that type where torch's ``allow_bf16_reduced_precision_reduction`` /
``allow_fp16_reduced_precision_reduction`` allow it, as for any 16-bit matmul in torch).
Inductor fuses such sums into its own kernels; an eager nested backend runs them as traced.

:func:`column_sums_as_products` rewrites each ``aten.sum.dim_IntList`` over the leading
dims of a contiguous bf16 or f16 tensor of static shape on a device in ``devices`` into
``aten.mm(ones, x.view(M, N)).view(result)``, one vector of ones per (M, type, device) for
the whole graph. It runs after BOO's patterns have taken their nodes (so that no matmul
pattern claims the product: BOO's kernels have no plan for a product of one row).
"""

from __future__ import annotations

import math
from collections.abc import Collection

import torch
import torch.fx

from ..plugins.patterns import tensor_value
from .layouts import node_value, static_layout

aten = torch.ops.aten
#: The types whose sums become products (float32's would be a TF32 question, not asked here).
SUMMED_TYPES = (torch.bfloat16, torch.float16)


def column_sums_as_products(graph: torch.fx.Graph, devices: Collection[str] = ("cuda",)) -> int:
    """Rewrite the sums the module docstring describes; how many were rewritten."""
    ones: dict[tuple[int, torch.dtype, torch.device], torch.fx.Node] = {}
    first = next((n for n in graph.nodes if n.op != "placeholder"), None)
    rewritten = 0
    for node in list(graph.nodes):
        found = _column_sum(node, devices)
        if found is None:
            continue
        source, value, rows, columns = found
        key = (rows, value.dtype, value.device)
        if key not in ones:
            with graph.inserting_before(first):
                ones[key] = graph.call_function(aten.full.default, ([1, rows], 1.0),
                                                {"dtype": value.dtype, "device": value.device})
        with graph.inserting_before(node):
            matrix = graph.call_function(aten.view.default, (source, [rows, columns]))
            product = graph.call_function(aten.mm.default, (ones[key], matrix))
            result = graph.call_function(aten.view.default, (product, list(node.meta["val"].shape)))
        result.meta = dict(node.meta)
        node.replace_all_uses_with(result)
        graph.erase_node(node)
        rewritten += 1
    return rewritten


def _column_sum(node: torch.fx.Node, devices: Collection[str]
                ) -> tuple[torch.fx.Node, torch.Tensor, int, int] | None:
    """(the summed node, its traced value, M, N) where ``node`` sums a contiguous tensor over
    its leading dims."""
    if node.op != "call_function" or node.target is not aten.sum.dim_IntList or node.kwargs \
            or not 2 <= len(node.args) <= 3:
        return None
    source, dims = node.args[0], node.args[1]
    value, result = node_value(source), tensor_value(node)
    if value is None or result is None or value.dtype not in SUMMED_TYPES or result.dtype != value.dtype \
            or value.device.type not in devices:
        return None
    layout, result_layout = static_layout(value), static_layout(result)
    if layout is None or result_layout is None or not value.is_contiguous():
        return None
    shape = layout[0]
    if not isinstance(dims, (list, tuple)) or not dims or value.dim() < 2:
        return None
    leading = sorted(d % value.dim() for d in dims)
    if leading != list(range(len(leading))) or len(leading) == value.dim():
        return None
    rows, columns = math.prod(shape[:len(leading)]), math.prod(shape[len(leading):])
    return (source, value, rows, columns) if rows > 1 and columns > 0 else None
