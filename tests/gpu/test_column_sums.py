"""A bf16 transformer MLP's training step under ``backend="iree_boo"`` on the GPU: its bias
gradients (sums of dY over the tokens) run as cuBLAS products with ones
(boo_core.dynamo.column_sums), and every gradient matches eager's within bf16's error."""

from __future__ import annotations

import pytest
import torch

from boo_core.dynamo import offload_summary, reset_offload_summary

pytestmark = pytest.mark.gpu
DEVICE = "cuda:0"


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)).to(
        DEVICE, torch.bfloat16)


def _gradients(model: torch.nn.Module, forward, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """The gradients of ``model``'s parameters, by name, through ``forward`` (it or its compiled form)."""
    model.zero_grad()
    forward(x).float().square().mean().backward()
    return {name: p.grad.detach().clone() for name, p in model.named_parameters()}


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_bias_gradients_are_products_with_ones_and_right(mode):
    torch._dynamo.reset()
    reset_offload_summary()
    eager = _mlp()
    compiled_model = _mlp()
    compiled = torch.compile(compiled_model, backend="iree_boo", mode=mode, dynamic=False)
    for _ in range(3):  # fresh tokens each step; graphs warm up and replay
        x = torch.randn(8, 197, 256, device=DEVICE, dtype=torch.bfloat16)
        want, got = _gradients(eager, eager, x), _gradients(compiled_model, compiled, x)
        for name, grad in want.items():
            error = (got[name].double() - grad.double()).norm() / grad.double().norm()
            assert error < 3e-2, (name, float(error))
    assert sum(g.column_sums for g in offload_summary().graphs) == 2  # both layers' bias gradients
