"""Autograd for launchables: BOO runs the forward kernel, a backward function the gradients.

The default backward differentiates the signature's PyTorch reference, so every op is
differentiable from its first day; an op replaces it with its own (torch's fused backward,
or BOO backward kernels) by passing ``backward=``. A backward that needs the forward's
results (softmax's takes y and dy) asks :func:`launch` to save them with ``save_outputs=True``;
outputs that carry no gradient (a normalization's saved statistics) are named by
``non_differentiable=``, as torch's own ops mark theirs.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

import torch

from ..errors import UnsupportedError
from .launchable import Launchable

Backward = Callable[[Sequence[torch.Tensor], Sequence[torch.Tensor], Sequence[bool]], Sequence[torch.Tensor | None]]
"""``backward(saved, output_grads, needs_grad) -> one gradient (or None) per input``.

``saved`` holds the inputs, followed by the outputs when :func:`launch` had ``save_outputs=True``;
``needs_grad`` has one flag per input."""


def reference_backward(launchable: Launchable) -> Backward:
    """Gradients by differentiating ``launchable.signature.reference`` with torch autograd."""

    def backward(saved, grads, needs_grad):
        inputs = saved[: len(needs_grad)]
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_(need) for t, need in zip(inputs, needs_grad)]
            outputs = launchable.signature.reference(*leaves)
            outputs = (outputs,) if isinstance(outputs, torch.Tensor) else tuple(outputs)
            wanted = [leaf for leaf in leaves if leaf.requires_grad]
            found = iter(torch.autograd.grad(outputs, wanted, grads, allow_unused=True))
        return [next(found) if need else None for need in needs_grad]

    return backward


class _LaunchFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, launchable: Launchable, backward: Backward, save_outputs: bool,  # type: ignore[override]
                non_differentiable: tuple[int, ...], *inputs: torch.Tensor):
        ctx.backward_fn = backward
        outputs = launchable(*inputs)
        results = (outputs,) if isinstance(outputs, torch.Tensor) else tuple(outputs)
        ctx.save_for_backward(*inputs, *(results if save_outputs else ()))
        ctx.mark_non_differentiable(*(results[i] for i in non_differentiable))
        return outputs

    @staticmethod
    def backward(ctx, *grads: torch.Tensor):  # type: ignore[override]
        needs = ctx.needs_input_grad[4:]
        input_grads = ctx.backward_fn(ctx.saved_tensors, grads, needs)
        return (None, None, None, None, *input_grads)


def launch(launchable: Launchable, *inputs: torch.Tensor, backward: Backward | None = None,
           save_outputs: bool = False, non_differentiable: Collection[int] = ()):
    """Call ``launchable`` on ``inputs``, recording it for autograd when gradients are needed.

    ``backward`` computes the input gradients (default: :func:`reference_backward`); with
    ``save_outputs=True`` it also receives the outputs, after the inputs.
    ``non_differentiable`` lists the positions of outputs that carry no gradient: they never
    require grad, and the backward receives zeros for them.
    """
    positions = _output_positions(launchable, non_differentiable) if non_differentiable else ()
    if torch.is_grad_enabled() and any(t.requires_grad for t in inputs):
        return _LaunchFunction.apply(launchable, backward or reference_backward(launchable), save_outputs, positions,
                                     *inputs)
    return launchable(*inputs)


def _output_positions(launchable: Launchable, positions: Collection[int]) -> tuple[int, ...]:
    """``positions`` sorted, each checked to name an output of ``launchable``'s signature."""
    count = len(launchable.signature.output_specs())
    if any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < count for i in positions):
        raise UnsupportedError(f"launch: non_differentiable={list(positions)!r} names an output "
                               f"{launchable.signature.func_name} does not have (it has {count}, from 0)")
    return tuple(sorted(set(positions)))
