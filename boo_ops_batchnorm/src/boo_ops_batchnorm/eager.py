"""``boo_batch_norm``: batch normalization on torch tensors through BOO kernels, differentiable."""

from __future__ import annotations

import dataclasses

import torch

from boo_core import ArgumentError, BooOpRegistry, Launchable, launchable_for
from boo_core.runtime.arguments import require_number, require_same_device
from boo_core.settings import get_settings

from .layout import is_channels_last, logical, memory_format_of, stored
from .signature import FLOAT_DTYPES, BatchNormSignature

WHERE = "boo_batch_norm"


def boo_batch_norm(
    input: torch.Tensor,
    running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> torch.Tensor:
    """``torch.nn.functional.batch_norm`` computed by BOO kernels on ``input``'s device.

    Same arguments and semantics: per channel (dim 1) over the batch and every spatial
    position; ``training=True`` normalizes with the batch's statistics and, where running
    statistics are given, updates them in place (``momentum``; the variance unbiased);
    ``training=False`` normalizes with the running statistics. A channels-last 4-D or 5-D
    input is normalized in place of memory (no copy) and the result is channels-last too.
    Differentiable in input, weight and bias: gradients come from PyTorch, or from BOO's
    backward kernel under ``BOO_USE_BACKWARD_KERNELS=1``.
    """
    x, weight, bias, running_mean, running_var = _check(input, running_mean, running_var, weight, bias)
    momentum = require_number(WHERE, "momentum", momentum)
    eps = require_number(WHERE, "eps", eps)
    if not training and running_mean is None:
        raise ArgumentError(f"{WHERE}: training=False needs running_mean and running_var")
    if x.numel() == 0 or (training and x.numel() // x.shape[1] == 1):
        # As torch: an empty result; one value per channel in training is torch's error to give.
        return torch.nn.functional.batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps)
    running = running_mean is not None
    # the kernel reads and writes the buffers' own dtype (a bf16 model's), where it can
    kept = running_mean.dtype if running and running_mean.dtype == running_var.dtype \
        and running_mean.dtype in FLOAT_DTYPES else None
    key = ("bnorm", x.shape, x.dtype, x.stride(), training, running, eps, kept)  # cheap: a dict lookup per call
    kernel = launchable_for(key, lambda: batch_norm_signature_for(x, training, running, eps, running_dtype=kept),
                            x.device)
    signature = kernel.signature
    x_stored = stored(x, signature)
    params = (weight if weight is not None else torch.ones(x.shape[1], dtype=x.dtype, device=x.device),
              bias if bias is not None else torch.zeros(x.shape[1], dtype=x.dtype, device=x.device))
    stats = () if running_mean is None else tuple(
        t.to(signature.running_stats_dtype).contiguous() for t in (running_mean, running_var))
    if signature.mode == "train" and stats:
        stats += (torch.full((1,), momentum, dtype=signature.stats_dtype, device=x.device),)
    needs_grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias))
    if signature.mode == "infer":
        if needs_grad:
            return _EvalBatchNorm.apply(kernel, x, params[0], params[1], stats[0], stats[1])
        return logical(kernel(x_stored, *params, *stats), signature)
    if needs_grad:
        outputs = _TrainBatchNorm.apply(kernel, x, params[0], params[1], *stats)
        y, *mean_var = outputs if isinstance(outputs, tuple) else (outputs,)
    else:
        y, *rest = kernel(x_stored, *params, *stats)
        y, mean_var = logical(y, signature), rest[2:]
    if running_mean is not None:
        with torch.no_grad():
            running_mean.copy_(mean_var[0])
            running_var.copy_(mean_var[1])
    return y


def batch_norm_signature_for(x: torch.Tensor, training: bool, running: bool, eps: float = 1e-5,
                             activation: str | None = None, running_dtype: torch.dtype | None = None,
                             residual: bool = False) -> BatchNormSignature:
    """The :class:`BatchNormSignature` ``boo_batch_norm`` (and the torch.compile patterns)
    run for an input like ``x``: a training forward saves its statistics (the backward's
    inputs); inference uses the running statistics, held in ``running_dtype`` (None: the
    statistics' own dtype); ``residual`` adds a tensor like ``x`` before the activation."""
    if x.dtype not in FLOAT_DTYPES:
        raise ArgumentError(f"{WHERE}: input has dtype {x.dtype}; expected float32, float16 or bfloat16")
    return BatchNormSignature(tuple(x.shape), mode="train" if training else "infer", spatial=True,
                              channels_last=is_channels_last(x), save=training, running=running, eps=eps,
                              dtype=x.dtype, activation=activation, running_dtype=running_dtype, residual=residual)


def backward_launchable(forward: BatchNormSignature, device: str | torch.device = "cpu",
                        summed: bool = False) -> Launchable:
    """The backward kernel of a training forward, ``(x, dy, weight, mean, invstd) -> (dx, dw, db)``
    (then the forward's y where it has an activation); ``summed``: y's gradient given as two
    tensors, the second last, and the gradient of the sum before the activation returned
    last (``BatchNormSignature``'s backward with ``residual``)."""
    signature = dataclasses.replace(forward, mode="bwd", running=False, save=True, residual=summed)
    return launchable_for(("bnorm_bwd", signature), lambda: signature, device)


def _check(input: object, running_mean: object, running_var: object, weight: object,
           bias: object) -> tuple[torch.Tensor, ...]:
    tensors = require_same_device(WHERE, {"input": input, "running_mean": running_mean, "running_var": running_var,
                                          "weight": weight, "bias": bias},
                                  optional=("running_mean", "running_var", "weight", "bias"))
    x = tensors["input"]
    if x.dim() < 2:
        raise ArgumentError(f"{WHERE}: input must be (N, C, *spatial), got shape {list(x.shape)}")
    if x.dtype not in FLOAT_DTYPES:
        raise ArgumentError(f"{WHERE}: input has dtype {x.dtype}; expected float32, float16 or bfloat16")
    channels = x.shape[1]
    if (tensors.get("running_mean") is None) != (tensors.get("running_var") is None):
        raise ArgumentError(f"{WHERE}: give both running_mean and running_var, or neither")
    for name in ("running_mean", "running_var", "weight", "bias"):
        t = tensors.get(name)
        if t is None:
            continue
        if tuple(t.shape) != (channels,):
            raise ArgumentError(f"{WHERE}: {name} has shape {list(t.shape)}, expected [{channels}] (one per channel)")
        if name in ("weight", "bias") and t.dtype != x.dtype:
            raise ArgumentError(f"{WHERE}: {name} has dtype {t.dtype}, input has {x.dtype}; they must match")
        if not t.dtype.is_floating_point:
            raise ArgumentError(f"{WHERE}: {name} has dtype {t.dtype}; expected a floating dtype")
    return x, tensors.get("weight"), tensors.get("bias"), tensors.get("running_mean"), tensors.get("running_var")


class _TrainBatchNorm(torch.autograd.Function):
    """The training forward through the BOO kernel; backward from the saved mean and invstd.
    Returns y, then the updated running statistics where there are any."""

    @staticmethod
    def forward(ctx, kernel: Launchable, x: torch.Tensor, weight: torch.Tensor,  # type: ignore[override]
                bias: torch.Tensor, *running: torch.Tensor):
        signature = kernel.signature
        y, mean, invstd, *updated = kernel(stored(x, signature), weight, bias, *running)
        ctx.signature = signature
        ctx.save_for_backward(x, weight, mean, invstd)
        ctx.mark_non_differentiable(*updated)
        return (logical(y, signature), *updated) if updated else logical(y, signature)

    @staticmethod
    def backward(ctx, dy: torch.Tensor, *_updated: torch.Tensor):  # type: ignore[override]
        x, weight, mean, invstd = ctx.saved_tensors
        signature = ctx.signature
        if gradients_on_boo(x):
            kernel = backward_launchable(signature, x.device)
            dy = dy.contiguous(memory_format=memory_format_of(x))
            dx, dw, db = kernel(stored(x, signature), stored(dy, signature), weight, mean, invstd)
            dx = logical(dx, signature)
        else:
            dx, dw, db = torch.ops.aten.native_batch_norm_backward(
                dy, x, weight, None, None, mean, invstd, True, signature.eps, list(ctx.needs_input_grad[1:4]))
        needs = ctx.needs_input_grad
        return (None, dx if needs[1] else None, dw if needs[2] else None, db if needs[3] else None,
                *(None,) * (len(needs) - 4))


def gradients_on_boo(x: torch.Tensor) -> bool:
    """Whether the gradients of a training batch norm of ``x`` run on BOO's kernels: as
    ``BOO_USE_BACKWARD_KERNELS`` says, except that ``auto`` takes channels-last inputs alone.
    Those are what made whole training steps faster; a channels-first ResNet-50's took 9 ms a
    step more on BOO's kernels than on the nested backend's (H200, docs/gpu.md)."""
    if not BooOpRegistry.backward_kernels_for("bnorm", x.device.type):
        return False
    return get_settings().use_backward_kernels != "auto" or is_channels_last(x)


#: Why ``auto`` leaves a channels-first batch norm's gradient to the nested backend.
AUTO_DECLINES_CHANNELS_FIRST = ("BOO_USE_BACKWARD_KERNELS=auto takes channels-last batch norms' gradients alone "
                                "(channels-first ones measured slower in a ResNet-50 step: docs/gpu.md)")


class _EvalBatchNorm(torch.autograd.Function):
    """Inference with the running statistics through the BOO kernel; gradients of that
    affine map from PyTorch."""

    @staticmethod
    def forward(ctx, kernel: Launchable, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,  # type: ignore[override]
                running_mean: torch.Tensor, running_var: torch.Tensor) -> torch.Tensor:
        signature = kernel.signature
        ctx.signature = signature
        ctx.save_for_backward(x, weight, running_mean, running_var)
        return logical(kernel(stored(x, signature), weight, bias, running_mean, running_var), signature)

    @staticmethod
    def backward(ctx, dy: torch.Tensor):  # type: ignore[override]
        x, weight, running_mean, running_var = ctx.saved_tensors
        needs = ctx.needs_input_grad
        dx, dw, db = torch.ops.aten.native_batch_norm_backward(
            dy, x, weight, running_mean, running_var, None, None, False, ctx.signature.eps, list(needs[1:4]))
        return None, dx, dw, db, None, None

