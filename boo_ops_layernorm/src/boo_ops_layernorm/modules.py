"""``BooLayerNorm``: a drop-in ``torch.nn.LayerNorm`` whose forward runs BOO kernels."""

from __future__ import annotations

import torch

from .eager import boo_layer_norm


class BooLayerNorm(torch.nn.LayerNorm):
    """``torch.nn.LayerNorm`` computed with :func:`boo_layer_norm`.

    Same constructor (``normalized_shape, eps, elementwise_affine, bias, device, dtype``),
    parameters, ``state_dict`` keys and initialization as the torch module, which it
    subclasses: a torch ``LayerNorm``'s state dict loads into it and back.
    """

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return boo_layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)
