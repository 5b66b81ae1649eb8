"""``boo_softmax``: softmax and log-softmax on torch tensors through BOO kernels, differentiable."""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from boo_core.plugin import (
    ArgumentError,
    Backward,
    BooOpRegistry,
    Launchable,
    launch,
    launchable_for,
    require_int,
    require_tensor,
)

from .signature import SoftmaxSignature


def boo_softmax(x: torch.Tensor, dim: int = -1, log: bool = False) -> torch.Tensor:
    """``torch.softmax(x, dim)``, or ``torch.log_softmax(x, dim)`` with ``log=True``, computed
    by a BOO kernel on ``x``'s device.

    ``x`` (float32, float16 or bfloat16, any shape) is viewed as MIOpen's NCHW with C the
    softmax dim: N the dims before it, H those after it. A non-contiguous ``x`` is copied
    first. Differentiable: the gradient comes from MIOpen's backward formula, computed by
    a BOO kernel under ``BOO_USE_BACKWARD_KERNELS=1`` and by PyTorch otherwise. An empty or
    0-d ``x`` gets PyTorch's result (no kernel), as ``torch.softmax`` gives it.
    """
    x = require_tensor("boo_softmax", "x", x)
    dim = require_int("boo_softmax", "dim", dim)
    if not -max(x.dim(), 1) <= dim < max(x.dim(), 1):
        raise ArgumentError(f"boo_softmax: dim {dim} is out of range for a {x.dim()}-D tensor")
    if x.dim() == 0 or x.numel() == 0:
        return torch.log_softmax(x, dim) if log else torch.softmax(x, dim)
    forward = softmax_launchable(x, dim, log)
    x_nchw = x.contiguous().reshape(forward.signature.shape)
    y = launch(forward, x_nchw, backward=_backward(forward.signature), save_outputs=True)
    return y.reshape(x.shape)


def boo_softmax_backward(y: torch.Tensor, dy: torch.Tensor, dim: int = -1, log: bool = False) -> torch.Tensor:
    """The gradient of ``boo_softmax(x, dim, log)`` from its result ``y`` and the gradient
    ``dy`` of that result, computed by a BOO kernel (MIOpen's backward)."""
    y, dy = require_tensor("boo_softmax_backward", "y", y), require_tensor("boo_softmax_backward", "dy", dy)
    if y.shape != dy.shape:
        raise ArgumentError(f"boo_softmax_backward: y has shape {list(y.shape)}, dy {list(dy.shape)}; they must match")
    if y.dim() == 0 or y.numel() == 0:  # a softmax over one element is constant; nothing at all: nothing
        return torch.zeros_like(dy)
    backward = softmax_launchable(y, dim, log, "bwd")
    shape = backward.signature.shape
    return backward(y.contiguous().reshape(shape), dy.contiguous().reshape(shape)).reshape(y.shape)


def softmax_signature_for(x: torch.Tensor, dim: int = -1, log: bool = False) -> SoftmaxSignature:
    """The forward :class:`SoftmaxSignature` that ``boo_softmax(x, dim, log)`` runs."""
    x = require_tensor("boo_softmax", "x", x)
    dim = require_int("boo_softmax", "dim", dim)
    if x.dim() == 0 or x.numel() == 0:
        raise ArgumentError(f"boo_softmax: x (shape {list(x.shape)}) must have at least one dim and one element")
    if not -x.dim() <= dim < x.dim():
        raise ArgumentError(f"boo_softmax: dim {dim} is out of range for a {x.dim()}-D tensor")
    dim %= x.dim()
    shape = tuple(x.shape)
    return SoftmaxSignature(n=math.prod(shape[:dim]), c=shape[dim], h=math.prod(shape[dim + 1:]),
                            algorithm="log" if log else "accurate", dtype=x.dtype)


def softmax_launchable(x: torch.Tensor, dim: int = -1, log: bool = False, mode: str = "fwd") -> Launchable:
    """The kernel of ``boo_softmax(x, dim, log)`` (``mode="bwd"``: its backward, taking
    ``(y, dy)``), on NCHW views of tensors shaped like ``x``. Repeated calls cost one
    dictionary lookup."""
    key = ("softmax", x.shape, x.dtype, dim, log, mode)
    return launchable_for(key, lambda: replace(softmax_signature_for(x, dim, log), mode=mode), x.device)


def _backward(forward: SoftmaxSignature) -> Backward:
    """dx from the saved output y, by a BOO kernel or by PyTorch, per the setting in force
    at the forward call."""
    use_kernel = BooOpRegistry.backward_kernels_for("softmax")

    def backward(saved, grads, needs_grad):
        _, y = saved  # the input x, then the output
        if use_kernel:  # y is NCHW with the softmax over C: dim 1
            return [boo_softmax_backward(y, grads[0], 1, forward.algorithm == "log")]
        return [replace(forward, mode="bwd").reference(y, grads[0])]

    return backward
