"""The RMS-norm arithmetic in PyTorch, on ``(rows, size)`` tensors: the signature's reference
and the source of every formulation (BOO exports these functions; it never runs them on a call).

Statistics and sums are computed in float32 at least (float64 when BOO's numerics check runs
the reference in float64) and every result is rounded to its dtype once. ``chunk`` selects
the order of the long sums: ``None`` sums at once, a number sums ``chunk`` consecutive terms
first and then the partial sums (the ``staged`` formulation): the same values, rounded
differently, in an order a GPU can spread over more threads.
"""

from __future__ import annotations

import torch


def statistics_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of rstd and of every sum: float32, or float64 for float64 inputs."""
    return torch.promote_types(dtype, torch.float32)


def row_sums(values: torch.Tensor, chunk: int | None = None) -> torch.Tensor:
    """Sums over dim 1 of ``(rows, size)`` values: at once, or by ``chunk`` columns first
    (``size`` must be a multiple of ``chunk``)."""
    if chunk is None:
        return values.sum(1)
    rows, size = values.shape
    return values.reshape(rows, size // chunk, chunk).sum(2).sum(1)


def column_sums(values: torch.Tensor, chunk: int | None = None) -> torch.Tensor:
    """Sums over dim 0 of ``(rows, size)`` values: at once, or by ``chunk`` rows first
    (``rows`` must be a multiple of ``chunk``)."""
    if chunk is None:
        return values.sum(0)
    rows, size = values.shape
    return values.reshape(rows // chunk, chunk, size).sum(1).sum(0)


def forward(x: torch.Tensor, weight: torch.Tensor, eps: float,
            chunk: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(y, rstd)``: ``rstd = 1 / sqrt(mean(x^2) + eps)`` per row, ``y = x * rstd * weight``.

    The mean is a sum divided once: IREE 3.13's CUDA backend does not compile a sum of
    pre-scaled terms (docs/gpu.md, "failed to distribute"). ``y`` is rounded once, after the
    weight (PyTorch's ``rms_norm`` also rounds before it)."""
    acc = statistics_dtype(x.dtype)
    xf = x.to(acc)
    rstd = torch.rsqrt(row_sums(xf * xf, chunk) / x.shape[1] + eps)
    y = xf * rstd[:, None] * weight.to(acc)
    return y.to(x.dtype), rstd


def backward(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor,
             chunk: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(dx, dweight)`` from the forward's saved ``rstd`` (x's statistic is not recomputed).

    With ``g = dy * weight`` and ``r = rstd``: ``dx = r * (g - x * r^2 * mean(g * x))`` per
    row, ``dweight = sum over rows of dy * x * r``. ``chunk`` stages dweight's column sums,
    the sums IREE serves worst on GPUs (one thread per column); dx's row sums are made at once."""
    acc = statistics_dtype(x.dtype)
    xf, dyf = x.to(acc), dy.to(acc)
    r = rstd.to(acc)[:, None]
    g = dyf * weight.to(acc)
    mean_gx = row_sums(g * xf)[:, None] / x.shape[1]
    dx = r * (g - xf * (r * r) * mean_gx)
    dweight = column_sums(dyf * xf * r, chunk)
    return dx.to(x.dtype), dweight.to(x.dtype)
