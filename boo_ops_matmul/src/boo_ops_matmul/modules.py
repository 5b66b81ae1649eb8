"""``BooLinear``: torch.nn.Linear whose forward runs a BOO kernel."""

from __future__ import annotations

import torch

from .eager import boo_linear
from .signature import check_activation


class BooLinear(torch.nn.Linear):
    """A drop-in ``torch.nn.Linear``: same arguments, parameters, initialization and
    ``state_dict`` keys (a ``torch.nn.Linear`` state dict loads as is); the forward runs
    :func:`boo_linear`.

    ``activation`` (BOO extension: None, ``"relu"``, ``"gelu"``, ``"silu"``) is applied to
    the output and fused into the kernel outside autograd.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None,
                 activation: str | None = None) -> None:
        check_activation(activation)
        super().__init__(in_features, out_features, bias, device, dtype)
        self.activation = activation

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return boo_linear(input, self.weight, self.bias, self.activation)

    def extra_repr(self) -> str:
        text = super().extra_repr()
        return f"{text}, activation={self.activation}" if self.activation else text
