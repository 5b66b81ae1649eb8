"""``boo_layer_norm``: layer normalization on torch tensors through BOO kernels, differentiable."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from boo_core import ArgumentError, BooOpRegistry, Launchable, launchable_for
from boo_core.runtime.arguments import require_int, require_number, require_same_device

from .signature import FLOAT_DTYPES, GRADIENTS, LayerNormSignature


def boo_layer_norm(
    x: torch.Tensor,
    normalized_shape: int | Sequence[int],
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """``torch.nn.functional.layer_norm`` computed by a BOO kernel on ``x``'s device.

    Normalizes over the trailing ``normalized_shape`` dims of ``x``; ``weight`` and ``bias``
    (each optional) have that shape and ``x``'s dtype. Non-contiguous tensors are made
    contiguous first. Differentiable in x, weight and bias: gradients come from PyTorch, or
    from BOO's backward kernel under ``BOO_USE_BACKWARD_KERNELS=1``.
    """
    x, weight, bias, normalized, eps = _check_arguments(x, normalized_shape, weight, bias, eps)
    if x.numel() == 0:  # as torch does: an empty result; no kernel
        return F.layer_norm(x, normalized, weight, bias, eps)
    forward = forward_launchable(x, normalized, weight, bias, eps)
    x, weight, bias = (None if t is None else t.contiguous() for t in (x, weight, bias))
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias)):
        return _LayerNormFunction.apply(forward, x, weight, bias)
    return forward(x, *(t for t in (weight, bias) if t is not None))[0]


def forward_launchable(x: torch.Tensor, normalized_shape: tuple[int, ...], weight: torch.Tensor | None = None,
                       bias: torch.Tensor | None = None, eps: float = 1e-5) -> Launchable:
    """The forward kernel for these arguments, ``(x[, weight][, bias]) -> (y, mean, rstd)``;
    repeated calls cost one dictionary lookup."""
    key = ("layernorm", x.shape, x.dtype, normalized_shape, weight is not None, bias is not None, eps)
    return launchable_for(key, lambda: layer_norm_signature_for(x, normalized_shape, weight, bias, eps), x.device)


def backward_launchable(forward: LayerNormSignature, gradients: tuple[str, ...],
                        device: str | torch.device = "cpu") -> Launchable:
    """The backward kernel of a forward signature, ``(dy, x, mean, rstd[, weight]) -> gradients``."""
    return launchable_for(("layernorm_bwd", forward, gradients),
                          lambda: dataclasses.replace(forward, mode="bwd", gradients=gradients), device)


def layer_norm_signature_for(x: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None = None,
                             bias: torch.Tensor | None = None, eps: float = 1e-5) -> LayerNormSignature:
    """The forward :class:`LayerNormSignature` that ``boo_layer_norm`` runs for these arguments."""
    x, weight, bias, normalized, eps = _check_arguments(x, normalized_shape, weight, bias, eps)
    if x.numel() == 0:
        raise ArgumentError(f"boo_layer_norm: x (shape {list(x.shape)}) has no elements")
    return LayerNormSignature(tuple(x.shape), x.dim() - len(normalized), weight=weight is not None,
                              bias=bias is not None, eps=eps, dtype=x.dtype)


_Checked = tuple[torch.Tensor, "torch.Tensor | None", "torch.Tensor | None", tuple[int, ...], float]


def _check_arguments(x: object, normalized_shape: object, weight: object, bias: object, eps: object) -> _Checked:
    """x, weight and bias (resolved), the normalized shape and eps, all checked."""
    tensors = require_same_device("boo_layer_norm", {"x": x, "weight": weight, "bias": bias},
                                  optional=("weight", "bias"))
    x, weight, bias = tensors["x"], tensors.get("weight"), tensors.get("bias")
    if isinstance(normalized_shape, int) and not isinstance(normalized_shape, bool):
        normalized_shape = (normalized_shape,)
    if isinstance(normalized_shape, (str, bytes)) or not isinstance(normalized_shape, Sequence):
        raise ArgumentError(f"boo_layer_norm: normalized_shape must be an int or a sequence of ints, "
                            f"got {normalized_shape!r}")
    normalized = tuple(require_int("boo_layer_norm", "normalized_shape", d) for d in normalized_shape)
    if not normalized or len(normalized) > x.dim() or tuple(x.shape[x.dim() - len(normalized):]) != normalized:
        raise ArgumentError(f"boo_layer_norm: normalized_shape {list(normalized)} must be the trailing dims of x "
                            f"(shape {list(x.shape)})")
    if x.dtype not in FLOAT_DTYPES:
        raise ArgumentError(f"boo_layer_norm: x has dtype {x.dtype}; expected float32, float16 or bfloat16")
    for name, param in (("weight", weight), ("bias", bias)):
        if param is None:
            continue
        if tuple(param.shape) != normalized:
            raise ArgumentError(f"boo_layer_norm: {name} has shape {list(param.shape)}, expected the normalized "
                                f"shape {list(normalized)}")
        if param.dtype != x.dtype:
            raise ArgumentError(f"boo_layer_norm: {name} has dtype {param.dtype}, x has {x.dtype}; they must match")
    eps = require_number("boo_layer_norm", "eps", eps)
    if eps < 0:
        raise ArgumentError(f"boo_layer_norm: eps must not be negative, got {eps}")
    return x, weight, bias, normalized, eps


class _LayerNormFunction(torch.autograd.Function):
    """Forward through the BOO kernel; backward from the mean and rstd it saved."""

    @staticmethod
    def forward(ctx, forward: Launchable, x: torch.Tensor, weight: torch.Tensor | None,  # type: ignore[override]
                bias: torch.Tensor | None) -> torch.Tensor:
        y, mean, rstd = forward(x, *(t for t in (weight, bias) if t is not None))
        ctx.signature = forward.signature
        ctx.save_for_backward(x, mean, rstd, weight, bias)
        return y

    @staticmethod
    def backward(ctx, dy: torch.Tensor):  # type: ignore[override]
        x, mean, rstd, weight, bias = ctx.saved_tensors
        _, needs_x, needs_w, needs_b = ctx.needs_input_grad
        gradients = tuple(g for g, need in zip(GRADIENTS, (needs_x, needs_w, needs_b)) if need)
        compute = _boo_backward if BooOpRegistry.backward_kernels_for("layernorm", x.device.type) else _torch_backward
        grads = compute(ctx.signature, gradients, dy.contiguous(), x, mean, rstd, weight, bias)
        return None, grads.get("dx"), grads.get("dw"), grads.get("db")


def _boo_backward(signature: LayerNormSignature, gradients: tuple[str, ...], dy: torch.Tensor, x: torch.Tensor,
                  mean: torch.Tensor, rstd: torch.Tensor, weight: torch.Tensor | None,
                  bias: torch.Tensor | None) -> dict[str, torch.Tensor]:
    backward = backward_launchable(signature, gradients, x.device)
    return by_gradient(gradients, backward(dy, x, mean, rstd, *(() if weight is None else (weight,))))


def by_gradient(gradients: tuple[str, ...],
                outputs: torch.Tensor | tuple[torch.Tensor, ...]) -> dict[str, torch.Tensor]:
    """A backward kernel's outputs by the gradient each is (``"dx"``, ``"dw"``, ``"db"``)."""
    return dict(zip(gradients, (outputs,) if isinstance(outputs, torch.Tensor) else outputs))


def _torch_backward(signature: LayerNormSignature, gradients: tuple[str, ...], dy: torch.Tensor, x: torch.Tensor,
                    mean: torch.Tensor, rstd: torch.Tensor, weight: torch.Tensor | None,
                    bias: torch.Tensor | None) -> dict[str, torch.Tensor]:
    # PyTorch's CPU kernel takes mean and rstd in x's dtype, with the normalized dims kept.
    keep = signature.stats_shape + (1,) * len(signature.normalized_shape)
    mean, rstd = (t.reshape(keep).to(x.dtype) for t in (mean, rstd))
    mask = [g in gradients for g in GRADIENTS]
    results = torch.ops.aten.native_layer_norm_backward(
        dy, x, list(signature.normalized_shape), mean, rstd, weight, bias, mask)
    return dict(zip(GRADIENTS, results))
