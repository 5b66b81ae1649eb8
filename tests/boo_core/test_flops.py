"""The offload summary's FLOP counts: a convolution's gradients are counted as the forward's
multiply-adds each, grouped or not (torch's own formula counts a grouped one as ungrouped)."""

from __future__ import annotations

import operator

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from boo_core.dynamo.flops import node_flops

aten = torch.ops.aten


def counts(fn, *args) -> list[int]:
    graph = make_fx(fn, tracing_mode="fake")(*args).graph
    return [node_flops(n) for n in graph.nodes if n.op == "call_function" and n.target is not operator.getitem]


@pytest.mark.parametrize(("channels", "groups", "window"), [(96, 96, 7), (64, 32, 3), (16, 1, 3)])
@pytest.mark.parametrize("mask", [(True, True), (True, False), (False, True)])
def test_each_gradient_of_a_convolution_counts_as_its_forward(channels, groups, window, mask):
    x = torch.empty(2, channels, 20, 20)
    w = torch.empty(channels, channels // groups, window, window)
    conv = (w.shape[0:1], [1, 1], [window // 2] * 2, [1, 1], False, [0, 0], groups)
    [forward] = counts(lambda x, w: aten.convolution(x, w, None, *conv[1:]), x, w)
    assert forward == 2 * 2 * 20 * 20 * channels * (channels // groups) * window * window
    grad_out = torch.empty(2, channels, 20, 20)
    [backward] = counts(lambda g, x, w: aten.convolution_backward(g, x, w, *conv, [*mask, False]), grad_out, x, w)
    assert backward == forward * sum(mask)
