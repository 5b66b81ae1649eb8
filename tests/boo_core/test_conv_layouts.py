"""Channels-last convolutions for channels-first networks (boo_core.dynamo.conv_layouts): the
pass on Dynamo's graphs, and what the backends then build for a channels-first network."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from boo_core.dynamo.conv_layouts import channels_last_convolutions
from boo_core.dynamo.trace import kernel_signatures
from boo_core.settings import settings_override
from boo_core.testing.models import TinyConvNet, resnet


def _dynamo_graph(model: nn.Module, x: torch.Tensor) -> tuple[torch.fx.GraphModule, list[torch.Tensor]]:
    """The graph Dynamo hands a backend for ``model(x)``, and the tensors it takes."""
    captured = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list) -> object:
        captured.append((gm, list(example_inputs)))
        return gm.forward

    torch._dynamo.reset()
    try:
        torch.compile(model, backend=backend, dynamic=False)(x)
    finally:
        torch._dynamo.reset()
    (found,) = captured
    return found


def _conversions(gm: torch.fx.GraphModule) -> list[torch.memory_format]:
    return [n.kwargs["memory_format"] for n in gm.graph.nodes if n.op == "call_method" and n.target == "contiguous"]


def _operands_seen(gm: torch.fx.GraphModule, *inputs: torch.Tensor) -> list[tuple[bool, bool]]:
    """For each convolution the graph runs on ``inputs``: whether its input and its weight
    were channels-last (2-D) or channels-last 3-D."""
    seen = []

    class Interpreter(torch.fx.Interpreter):
        def call_function(self, target, args, kwargs):
            if target in (torch.conv2d, torch.conv3d):
                memory_format = torch.channels_last if target is torch.conv2d else torch.channels_last_3d
                seen.append(tuple(t.is_contiguous(memory_format=memory_format) for t in args[:2]))
            return super().call_function(target, args, kwargs)

    Interpreter(gm).run(*inputs)
    return seen


def test_a_channels_first_networks_convolutions_get_channels_last_operands_and_compute_the_same():
    torch.manual_seed(0)
    model, x = TinyConvNet(), torch.randn(2, 3, 16, 16)
    gm, inputs = _dynamo_graph(model, x)
    (want,) = gm(*inputs)
    assert _operands_seen(gm, *inputs) == [(False, False), (False, False)]

    inserted = channels_last_convolutions(gm, lambda value: value.device.type == "cpu")

    # Both convolutions' inputs and weights: four conversions, each to channels-last.
    assert inserted == 4 and _conversions(gm) == [torch.channels_last] * 4
    assert _operands_seen(gm, *inputs) == [(True, True), (True, True)]
    (got,) = gm(*inputs)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_nothing_changes_where_the_input_is_not_wanted_or_already_channels_last():
    torch.manual_seed(0)
    model, x = TinyConvNet(), torch.randn(2, 3, 16, 16)
    gm, _ = _dynamo_graph(model, x)
    assert channels_last_convolutions(gm, lambda value: value.is_cuda) == 0  # a CPU graph, CUDA wanted
    assert _conversions(gm) == []

    channels_last = model.to(memory_format=torch.channels_last)
    gm, _ = _dynamo_graph(channels_last, x.contiguous(memory_format=torch.channels_last))
    assert channels_last_convolutions(gm, lambda value: True) == 0


def test_three_d_convolutions_take_channels_last_3d_and_one_d_ones_are_left_alone():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv3d(4, 8, 3, padding=1), nn.ReLU(), nn.Conv3d(8, 8, 3, padding=1))
    x = torch.randn(2, 4, 4, 6, 6)
    gm, inputs = _dynamo_graph(model, x)
    (want,) = gm(*inputs)
    assert channels_last_convolutions(gm, lambda value: True) == 4
    assert _conversions(gm) == [torch.channels_last_3d] * 4
    assert _operands_seen(gm, *inputs) == [(True, True), (True, True)]
    torch.testing.assert_close(gm(*inputs)[0], want, rtol=1e-5, atol=1e-6)

    gm, _ = _dynamo_graph(nn.Sequential(nn.Conv1d(4, 8, 3), nn.Conv1d(8, 8, 3)), torch.randn(2, 4, 16))
    assert channels_last_convolutions(gm, lambda value: True) == 0


def test_a_graph_with_one_convolution_is_left_as_it_is():
    """A vision transformer's patch embedding: its output becomes tokens at once, and a
    channels-last one would cost a copy there."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 4, stride=4), nn.Flatten(2))
    gm, _ = _dynamo_graph(model, torch.randn(2, 3, 16, 16))
    assert channels_last_convolutions(gm, lambda value: True) == 0 and _conversions(gm) == []


@pytest.mark.parametrize(("rewrites", "layout"), [("auto", "NCHW"), ("all", "NHWC")])
def test_the_backend_builds_channels_last_kernels_for_a_channels_first_resnet_where_graphs_are_rewritten(
        rewrites, layout):
    """On the CPU ``auto`` leaves graphs as they are; ``all`` (as ``auto`` does on GPUs) gives
    every convolution of a channels-first ResNet-18, forward and backward, channels-last
    tensors, and its batch norms follow."""
    torch.manual_seed(0)
    model = resnet(18, num_classes=10).train()
    x = torch.randn(2, 3, 64, 64)  # the last stage's maps 2 x 2: at 1 x 1 both layouts are the same memory
    with settings_override(graph_rewrites=rewrites):
        signatures = kernel_signatures(model, x, backward=True)
    convolutions = [s for s in signatures if s.op_name == "conv"]
    assert {s.mode for s in convolutions} == {"fwd", "bwd", "wrw"}
    assert {(s.input_layout, s.output_layout) for s in convolutions} == {(layout, layout)}
    batch_norms = [s for s in signatures if s.op_name == "bnorm"]
    assert batch_norms and all(s.channels_last == (layout == "NHWC") for s in batch_norms)


def test_a_graph_compiled_with_dynamic_shapes_is_left_as_it_is():
    torch.manual_seed(0)
    captured = []

    def backend(gm, example_inputs):
        captured.append(channels_last_convolutions(gm, lambda value: True))
        return gm.forward

    torch._dynamo.reset()
    try:
        torch.compile(TinyConvNet(), backend=backend, dynamic=True)(torch.randn(2, 3, 16, 16))
    finally:
        torch._dynamo.reset()
    assert captured == [0]
