"""``boo_rms_norm``: RMS normalization of torch tensors by BOO kernels, differentiable."""

from __future__ import annotations

import math
from dataclasses import replace

import torch
import torch.nn.functional as F

from boo_core.plugin import (
    ArgumentError,
    Backward,
    BooOpRegistry,
    Launchable,
    launch,
    launchable_for,
    require_number,
    require_tensors,
)

from .signature import DTYPES, RMSNormSignature

_WHERE = "boo_rms_norm"


def boo_rms_norm(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float | None = None) -> torch.Tensor:
    """``torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, eps)`` by a BOO kernel on
    ``x``'s device.

    ``x`` (float32, float16 or bfloat16, at least 1-D) is normalized over its last dim;
    ``weight`` (that dim's length, ``x``'s dtype) defaults to ones, ``eps`` to
    ``torch.finfo(x.dtype).eps`` as in PyTorch. Non-contiguous tensors are copied first.
    Differentiable in x and weight: the gradients come from the rstd the forward kernel
    saved, by BOO's backward kernel under ``BOO_USE_BACKWARD_KERNELS=1`` and by PyTorch
    otherwise. An empty ``x`` gets PyTorch's result (no kernel).
    """
    x, weight, eps = _check_arguments(x, weight, eps)
    if x.numel() == 0:
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    forward = rms_norm_launchable(x, eps)
    if weight is None:
        weight = torch.ones(x.shape[-1], dtype=x.dtype, device=x.device)
    rows = forward.signature.rows
    y, _ = launch(forward, x.contiguous().reshape(rows, -1), weight.contiguous(),
                  backward=_backward(forward.signature), save_outputs=True)
    return y.reshape(x.shape)


def rms_norm_signature_for(x: torch.Tensor, weight: torch.Tensor | None = None,
                           eps: float | None = None) -> RMSNormSignature:
    """The forward :class:`RMSNormSignature` that ``boo_rms_norm(x, weight, eps)`` runs."""
    x, weight, eps = _check_arguments(x, weight, eps)
    if x.numel() == 0:
        raise ArgumentError(f"{_WHERE}: x (shape {list(x.shape)}) has no elements")
    return RMSNormSignature(math.prod(x.shape[:-1]), x.shape[-1], eps, x.dtype)


def rms_norm_launchable(x: torch.Tensor, eps: float, mode: str = "fwd") -> Launchable:
    """The kernel of ``boo_rms_norm`` for tensors shaped like ``x`` (``mode="bwd"``: its
    backward); repeated calls cost one dictionary lookup."""
    key = ("rmsnorm", x.shape, x.dtype, eps, mode)
    return launchable_for(key, lambda: replace(rms_norm_signature_for(x, None, eps), mode=mode), x.device)


def _check_arguments(x: object, weight: object, eps: object) -> tuple[torch.Tensor, torch.Tensor | None, float]:
    tensors = require_tensors(_WHERE, {"x": x, "weight": weight}, dtypes=DTYPES, optional=("weight",))
    x, weight = tensors["x"], tensors.get("weight")
    if x.dim() == 0:
        raise ArgumentError(f"{_WHERE}: x must have at least one dim (it is normalized over its last)")
    if weight is not None and tuple(weight.shape) != (x.shape[-1],):
        raise ArgumentError(f"{_WHERE}: weight has shape {list(weight.shape)}; expected [{x.shape[-1]}], "
                            "x's last dim")
    eps = torch.finfo(x.dtype).eps if eps is None else require_number(_WHERE, "eps", eps)
    if eps < 0:
        raise ArgumentError(f"{_WHERE}: eps must not be negative, got {eps}")
    return x, weight, eps


def _backward(forward: RMSNormSignature) -> Backward:
    """dx and dweight from the saved rstd, by a BOO kernel or by PyTorch, per the setting in
    force at the forward call. ``saved`` is (x, weight, y, rstd): the inputs, then the
    outputs; rstd's own gradient is not used (boo_rms_norm does not return it)."""
    use_kernel = BooOpRegistry.backward_kernels_for("rmsnorm")
    signature = replace(forward, mode="bwd")

    def backward(saved, grads, needs_grad):
        x, weight, _, rstd = saved
        dy = grads[0].contiguous()
        if use_kernel:
            dx, dweight = launchable_for(("rmsnorm_bwd", signature), lambda: signature, x.device)(dy, x, weight, rstd)
        else:
            dx, dweight = signature.reference(dy, x, weight, rstd)
        return [dx if needs_grad[0] else None, dweight if needs_grad[1] else None]

    return backward
