"""``boo_core.runtime.autograd.launch``: what a backward function receives, and the default backward."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch

from boo_core import Signature, TensorSpec, UnsupportedError, get_launchable
from boo_core.runtime.autograd import launch
from boo_core.runtime.devices import resolve_device
from boo_core.runtime.launchable import ReferenceLaunchable

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


@dataclass(frozen=True)
class ScaledAndMean(Signature):
    """Two outputs: x scaled by 3, and x's mean (a statistic, as a normalization saves)."""

    op_name: ClassVar[str] = "scaled_and_mean"

    size: int

    def readable_name(self) -> str:
        return f"scaled_and_mean_n{self.size}"

    def input_specs(self):
        return [TensorSpec("x", (self.size,), torch.float32)]

    def output_specs(self):
        return [TensorSpec("y", (self.size,), torch.float32), TensorSpec("mean", (1,), torch.float32)]

    def reference(self, x):
        return x * 3.0, x.mean().reshape(1)

    @property
    def flops(self) -> int:
        return 2 * self.size


def _two_outputs(size: int) -> ReferenceLaunchable:
    return ReferenceLaunchable(ScaledAndMean(size), resolve_device("cpu"), ())


def test_an_output_marked_non_differentiable_needs_no_gradient_and_its_gradient_is_zero():
    x = torch.randn(6, requires_grad=True)
    received = []

    def backward(saved, grads, needs_grad):
        received.append([g.clone() for g in grads])
        return [grads[0] * 3.0]

    y, mean = launch(_two_outputs(6), x, backward=backward, save_outputs=True, non_differentiable=[1])
    assert y.requires_grad and not mean.requires_grad
    torch.testing.assert_close(mean, x.detach().mean().reshape(1))
    y.sum().backward()
    [(y_grad, mean_grad)] = received
    assert torch.equal(y_grad, torch.ones(6)) and torch.equal(mean_grad, torch.zeros(1))
    assert torch.equal(x.grad, torch.full((6,), 3.0))


def test_without_the_mark_every_output_carries_its_gradient():
    x = torch.randn(4, requires_grad=True)
    y, mean = launch(_two_outputs(4), x)
    assert mean.requires_grad
    (y.sum() + mean.sum()).backward()  # the default backward differentiates the reference
    torch.testing.assert_close(x.grad, torch.full((4,), 3.0 + 1 / 4))


@pytest.mark.parametrize("positions", [[2], [-1], ["mean"], [True]])
def test_a_non_differentiable_position_the_op_does_not_have_is_an_error_naming_it(positions):
    with pytest.raises(UnsupportedError, match=r"non_differentiable=.* names an output scaled_and_mean_n4 does "
                                               r"not have \(it has 2, from 0\)"):
        launch(_two_outputs(4), torch.randn(4, requires_grad=True), non_differentiable=positions)
