"""``boo_core.runtime.autograd.launch``: what a backward function receives, and the default backward."""

from __future__ import annotations

import pytest
import torch

from boo_core import get_launchable
from boo_core.runtime.autograd import launch

from .fake_plugins.scale_op import ScaleSignature


@pytest.mark.parametrize("save_outputs", [False, True])
def test_backward_receives_the_inputs_then_the_outputs_when_asked(scale_registry, save_outputs):
    launchable = get_launchable(ScaleSignature(4, 3.0))
    x = torch.randn(4, requires_grad=True)
    received = []

    def backward(saved, grads, needs_grad):
        received.append((saved, needs_grad))
        return [grads[0] * 3.0]

    y = launch(launchable, x, backward=backward, save_outputs=save_outputs)
    y.sum().backward()
    [(saved, needs_grad)] = received
    assert len(saved) == (2 if save_outputs else 1) and torch.equal(saved[0], x.detach())
    if save_outputs:
        assert torch.equal(saved[1], y.detach())
    assert tuple(needs_grad) == (True,)
    assert torch.equal(x.grad, torch.full((4,), 3.0))


@pytest.mark.parametrize("save_outputs", [False, True])
def test_the_default_backward_differentiates_the_reference(scale_registry, save_outputs):
    x = torch.randn(5, requires_grad=True)
    launch(get_launchable(ScaleSignature(5, -2.0)), x, save_outputs=save_outputs).sum().backward()
    assert torch.equal(x.grad, torch.full((5,), -2.0))


def test_without_gradients_nothing_is_recorded(scale_registry):
    y = launch(get_launchable(ScaleSignature(3, 2.0)), torch.ones(3), save_outputs=True)
    assert y.grad_fn is None and torch.equal(y, torch.full((3,), 2.0))
