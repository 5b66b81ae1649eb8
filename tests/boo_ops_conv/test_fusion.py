"""The conv plugin's fusion patterns: what torch.compile leaves to PyTorch, and why."""

from __future__ import annotations

import operator

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from boo_core.plugins.patterns import Decline, FusionMatch
from boo_ops_conv.cba_fusion import ConvBatchNormInference
from boo_ops_conv.fusion import DEPTHWISE_ON_CUDA, GROUPED_ON_CUDA, ConvBackward, ConvForward

aten = torch.ops.aten


def _node(fn, shapes, device, target):
    """The ``target`` node of ``fn`` traced with fake tensors of ``shapes`` on ``device``
    (a CUDA graph's metadata, traced without a GPU), unread outputs dropped as AOTAutograd does."""
    with FakeTensorMode():
        graph = make_fx(fn)(*(torch.empty(shape, device=device) for shape in shapes)).graph
    graph.eliminate_dead_code()
    return next(n for n in graph.nodes if n.target is target)


def _conv(groups):
    return lambda x, w: aten.convolution(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], groups)


def _conv_backward(groups):
    return lambda dy, x, w: aten.convolution_backward(dy, x, w, [8], [1, 1], [1, 1], [1, 1], False, [0, 0], groups,
                                                      [True, True, False])


def _conv_bn_relu(groups):
    def fn(x, w, gamma, beta, mean, var):
        y = aten.convolution(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], groups)
        return aten.relu(operator.getitem(aten._native_batch_norm_legit_no_training(y, gamma, beta, mean, var,
                                                                                    0.1, 1e-5), 0))
    return fn


CASES = {
    "forward": (ConvForward(), _conv, [(2, 8, 6, 6), lambda g: (8, 8 // g, 3, 3)], aten.convolution.default),
    "backward": (ConvBackward(), _conv_backward, [(2, 8, 6, 6), (2, 8, 6, 6), lambda g: (8, 8 // g, 3, 3)],
                 aten.convolution_backward.default),
    "conv + bn + relu": (ConvBatchNormInference(), _conv_bn_relu,
                         [(2, 8, 6, 6), lambda g: (8, 8 // g, 3, 3), (8,), (8,), (8,), (8,)], aten.convolution.default),
}


@pytest.mark.parametrize("case", CASES)
def test_a_grouped_conv_on_cuda_is_left_to_pytorch_with_the_reason(case):
    """BOO's grouped kernels took 15x cuDNN's time (geometric mean) on real networks' layers, its depthwise
    ones lose more than they win; offloading them would make the network slower. Ungrouped on CUDA, and
    grouped on the CPU, are taken."""
    pattern, make, shapes, target = CASES[case]

    def matched(groups, device):
        sized = [shape(groups) if callable(shape) else shape for shape in shapes]
        return pattern.match(_node(make(groups), sized, device, target))

    declined = matched(4, "cuda")
    assert isinstance(declined, Decline) and declined.reason == GROUPED_ON_CUDA
    declined = matched(8, "cuda")  # a channel a group: depthwise, whose kernels are measured apart
    assert isinstance(declined, Decline) and declined.reason == DEPTHWISE_ON_CUDA
    assert isinstance(matched(1, "cuda"), FusionMatch)
    assert isinstance(matched(4, "cpu"), FusionMatch)
