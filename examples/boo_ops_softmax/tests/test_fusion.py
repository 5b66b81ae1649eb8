"""``torch.compile(backend="iree_boo")``: softmax and log-softmax run as BOO kernels."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from boo_core.plugin import BooFallbackWarning, offload_summary, reset_offload_summary, settings_override


class Scores(nn.Module):
    def forward(self, q, k):
        scores = q @ k.transpose(-1, -2)
        return torch.softmax(scores, dim=-1), torch.log_softmax(q, dim=1)


def compile_and_run(model: nn.Module, *inputs: torch.Tensor):
    torch._dynamo.reset()
    reset_offload_summary()
    return torch.compile(model, backend="iree_boo", dynamic=False)(*inputs)


def test_forward_and_backward_become_boo_kernels():
    q = torch.randn(2, 5, 8, requires_grad=True)
    k = torch.randn(2, 6, 8)
    with settings_override(use_backward_kernels=True):
        probabilities, log_probabilities = compile_and_run(Scores(), q, k)
        (probabilities.square().sum() + log_probabilities.sum()).backward()
    forward, backward = offload_summary().graphs
    assert forward.offloaded["softmax.forward"] == 2 and backward.offloaded["softmax.backward"] == 2
    q64 = q.detach().double().requires_grad_()
    expected, expected_log = Scores()(q64, k.double())
    (expected.square().sum() + expected_log.sum()).backward()
    torch.testing.assert_close(probabilities, expected.float(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(log_probabilities, expected_log.float(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(q.grad, q64.grad.float(), rtol=1e-4, atol=1e-5)


def test_float64_stays_with_pytorch_and_says_why():
    x = torch.randn(3, 4, dtype=torch.float64)
    with pytest.warns(BooFallbackWarning, match=r"BOO cannot take softmax.forward here \(softmax dtype "
                                                r"torch.float64 is not supported"):
        y = compile_and_run(nn.Softmax(dim=1), x)
    torch.testing.assert_close(y, torch.softmax(x, 1))
    [graph] = offload_summary().graphs
    assert not graph.offloaded and "float64" in graph.reasons["aten._softmax"]
