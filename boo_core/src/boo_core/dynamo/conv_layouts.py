"""Channels-last convolutions for networks written channels-first.

A torchvision network is channels-first unless its user converts it. BOO's fast GPU kernels
(the kernel library's convolutions and batch norms) take channels-last tensors, and IREE's own
kernels for channels-first ones are several times slower: a channels-first ResNet-50 training
step took 30 ms under ``iree_boo`` against 7.4 under Inductor (docs/gpu.md), which converts
such graphs itself (its layout optimization). This pass does the same on the graph Dynamo
hands the backend, before AOTAutograd traces it: each 2-D or 3-D convolution whose input or
weight is not channels-last gets a ``contiguous(memory_format=...)`` of it first. Traced, only
the first of those copies of the activations stays (the network's input): a convolution of
channels-last tensors returns one, and batch norm, ReLU, residual adds and pooling keep the
layout, so every later conversion traces to nothing. The weights are copied each step (and
their gradients back), a few tens of microseconds in a ResNet-50 step. A graph with a single
convolution (a vision transformer's patch embedding, whose output is reshaped into tokens at
once) is left as it is: nothing after it would read the layout.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.fx

#: The convolutions converted (``torch.nn.functional.conv2d`` is ``torch.conv2d``), and the
#: channels-last memory format of their tensors.
CONVOLUTIONS: dict[object, torch.memory_format] = {torch.conv2d: torch.channels_last,
                                                   torch.conv3d: torch.channels_last_3d}
_OPERANDS = (("input", 0), ("weight", 1))


def channels_last_convolutions(gm: torch.fx.GraphModule, wanted: Callable[[torch.Tensor], bool]) -> int:
    """Give every convolution of Dynamo's graph ``gm`` channels-last operands where its input is
    a tensor ``wanted`` accepts and the graph has more than one convolution (module docstring);
    the number of conversions inserted. The graph is recompiled where one was."""
    convolutions = [node for node in gm.graph.nodes if node.op == "call_function" and node.target in CONVOLUTIONS]
    if len(convolutions) < 2:
        return 0
    inserted = 0
    for node in convolutions:
        memory_format = CONVOLUTIONS[node.target]
        operands = [_operand(node, name, index) for name, index in _OPERANDS]
        values = [_example(operand) for operand in operands]
        if values[0] is None or not wanted(values[0]) or not all(map(_static, values)):
            continue
        for operand, value in zip(operands, values, strict=True):
            if value is None or value.dim() != _rank(memory_format) or value.is_contiguous(
                    memory_format=memory_format):
                continue
            with gm.graph.inserting_before(node):
                converted = gm.graph.call_method("contiguous", (operand,), {"memory_format": memory_format})
            converted.meta["example_value"] = value.contiguous(memory_format=memory_format)
            node.replace_input_with(operand, converted)
            inserted += 1
    if inserted:
        gm.recompile()
    return inserted


def _operand(node: torch.fx.Node, name: str, index: int) -> object:
    return node.args[index] if len(node.args) > index else node.kwargs.get(name)


def _example(operand: object) -> torch.Tensor | None:
    """The tensor Dynamo traced for a graph node (None for anything else)."""
    if not isinstance(operand, torch.fx.Node):
        return None
    value = operand.meta.get("example_value")
    return value if isinstance(value, torch.Tensor) else None


def _static(value: torch.Tensor | None) -> bool:
    """Whether a traced tensor's sizes and strides are plain integers (a graph compiled with
    dynamic shapes is left as it is: asking its layout would add guards the graph cannot take)."""
    return value is None or all(isinstance(n, int) for n in (*value.shape, *value.stride()))


def _rank(memory_format: torch.memory_format) -> int:
    return 5 if memory_format == torch.channels_last_3d else 4
