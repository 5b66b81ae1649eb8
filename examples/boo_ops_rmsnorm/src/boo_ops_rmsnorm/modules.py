"""``BooRMSNorm``: a drop-in ``torch.nn.RMSNorm`` whose forward runs BOO kernels."""

from __future__ import annotations

import torch

from .eager import boo_rms_norm


class BooRMSNorm(torch.nn.RMSNorm):
    """``torch.nn.RMSNorm`` computed with :func:`boo_rms_norm`.

    Same constructor (``normalized_shape, eps, elementwise_affine, device, dtype``),
    parameters and ``state_dict`` as the torch module, which it subclasses. A normalized
    shape of several dims is normalized as one dim of their product (the same RMS).
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dims = len(self.normalized_shape)
        if x.dim() < dims or tuple(x.shape[x.dim() - dims:]) != tuple(self.normalized_shape):
            return super().forward(x)  # PyTorch's error message, naming the shapes
        weight = None if self.weight is None else self.weight.reshape(-1)
        flat = x.reshape(*x.shape[:x.dim() - dims], -1)
        return boo_rms_norm(flat, weight, self.eps).reshape(x.shape)
