"""torch.compile with BOO's backends runs nn.LayerNorm's aten ops on layernorm kernels."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from boo_core.dynamo import offload_summary, reset_offload_summary
from boo_core.settings import settings_override
from boo_core.verify.numerics import compare

from . import reference


@pytest.fixture
def fresh_compile():
    torch._dynamo.reset()
    reset_offload_summary()
    yield
    torch._dynamo.reset()


def test_inference_offloads_native_layer_norm(fresh_compile):
    model = nn.LayerNorm(16).eval()
    with torch.no_grad():
        model.weight.normal_()
        model.bias.normal_()
        x = torch.randn(4, 7, 16)
        got = torch.compile(model, backend="iree_boo", dynamic=False)(x)
    assert offload_summary().offloaded["layernorm.forward"] == 1
    expected = reference.forward(x, 1, model.weight.detach(), model.bias.detach())[0]
    assert compare("y", got, expected, accumulation_length=16).passed


def test_training_offloads_the_backward_under_backward_kernels(fresh_compile):
    model = nn.LayerNorm(16, bias=False)
    x = torch.randn(4, 7, 16, requires_grad=True)
    dy = torch.randn(4, 7, 16)
    with settings_override(use_backward_kernels=True):
        torch.compile(model, backend="iree_boo", dynamic=False)(x).backward(dy)
    offloaded = offload_summary().offloaded
    assert offloaded["layernorm.forward"] == 1 and offloaded["layernorm.backward"] == 1
    expected = reference.backward(dy, x.detach(), 1, model.weight.detach())
    assert compare("dx", x.grad, expected["dx"], accumulation_length=16).passed
    assert compare("dw", model.weight.grad, expected["dw"], accumulation_length=28).passed
