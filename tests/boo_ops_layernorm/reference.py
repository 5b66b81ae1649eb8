"""Layer normalization in float64, written for the tests independently of the plugin."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def forward(x: torch.Tensor, normalized_ndim: int, weight: torch.Tensor | None = None,
            bias: torch.Tensor | None = None, eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, mean, rstd): y by ``F.layer_norm``, mean and rstd by hand, all in float64."""
    xd = x.double()
    shape = tuple(x.shape[x.dim() - normalized_ndim:])
    y = F.layer_norm(xd, shape, None if weight is None else weight.double(), None if bias is None else bias.double(),
                     eps)
    rows = xd.reshape(-1, math.prod(shape))
    mean = rows.sum(1) / rows.shape[1]
    variance = ((rows - mean[:, None]) ** 2).sum(1) / rows.shape[1]
    stats_shape = tuple(x.shape[: x.dim() - normalized_ndim])
    return y, mean.reshape(stats_shape), (1 / torch.sqrt(variance + eps)).reshape(stats_shape)


def backward(dy: torch.Tensor, x: torch.Tensor, normalized_ndim: int, weight: torch.Tensor | None = None,
             bias: torch.Tensor | None = None, eps: float = 1e-5) -> dict[str, torch.Tensor]:
    """{"dx", "dw", "db"}: torch autograd through ``F.layer_norm`` in float64."""
    leaves = {"dx": x.double().requires_grad_()}
    if weight is not None:
        leaves["dw"] = weight.double().requires_grad_()
    if bias is not None:
        leaves["db"] = bias.double().requires_grad_()
    shape = tuple(x.shape[x.dim() - normalized_ndim:])
    y = F.layer_norm(leaves["dx"], shape, leaves.get("dw"), leaves.get("db"), eps)
    grads = torch.autograd.grad(y, list(leaves.values()), dy.double())
    return dict(zip(leaves, grads))
