"""``BooConv*`` modules: torch.nn convolutions that run on BOO kernels.

Each is a subclass of its torch.nn counterpart with the same constructor, parameters and
``state_dict`` keys (weights load unchanged); only ``forward`` differs.
:func:`convert_convs` turns the convolutions of an existing model into these in place.
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torch import nn

from boo_core import ArgumentError
from boo_core.runtime.arguments import require_tensor

from .eager import _string_padding, boo_conv

logger = logging.getLogger(__name__)


def _forward(module: nn.modules.conv._ConvNd, input: torch.Tensor, output_padding=0) -> torch.Tensor:
    rank = len(module.kernel_size)
    input = require_tensor(type(module).__name__, "input", input, dims=(rank + 1, rank + 2))
    unbatched = input.dim() == rank + 1
    if unbatched:
        input = input.unsqueeze(0)
    padding = module.padding
    if module.padding_mode != "zeros":
        if isinstance(padding, str):
            before, after = _string_padding(padding, rank, module.kernel_size, module.stride, module.dilation)
        else:
            before = after = padding
        pads = [p for pair in zip(reversed(before), reversed(after)) for p in pair]
        input, padding = F.pad(input, pads, mode=module.padding_mode), 0
    output = boo_conv(input, module.weight, module.bias, stride=module.stride, padding=padding,
                      dilation=module.dilation, groups=module.groups, transposed=module.transposed,
                      output_padding=output_padding)
    return output.squeeze(0) if unbatched else output


def _transposed_output_padding(module: nn.modules.conv._ConvTransposeNd, input: torch.Tensor,
                               output_size: list[int] | None) -> tuple[int, ...]:
    """The output padding that makes a transposed conv produce ``output_size``."""
    if output_size is None:
        return module.output_padding
    rank = len(module.kernel_size)
    wanted = list(output_size)[-rank:]
    padding = []
    for i, size in enumerate(wanted):
        smallest = ((input.shape[-rank + i] - 1) * module.stride[i] - 2 * module.padding[i]
                    + module.dilation[i] * (module.kernel_size[i] - 1) + 1)
        extra = size - smallest
        reach = max(module.stride[i], module.dilation[i])
        if not 0 <= extra < reach:
            raise ArgumentError(f"{type(module).__name__}: output_size {tuple(wanted)} is not reachable; "
                                f"dim {i} must be in [{smallest}, {smallest + reach - 1}]")
        padding.append(extra)
    return tuple(padding)


class BooConv1d(nn.Conv1d):
    """torch.nn.Conv1d on a BOO kernel."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return _forward(self, input)


class BooConv2d(nn.Conv2d):
    """torch.nn.Conv2d on a BOO kernel."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return _forward(self, input)


class BooConv3d(nn.Conv3d):
    """torch.nn.Conv3d on a BOO kernel."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return _forward(self, input)


class BooConvTranspose1d(nn.ConvTranspose1d):
    """torch.nn.ConvTranspose1d on a BOO kernel."""

    def forward(self, input: torch.Tensor, output_size: list[int] | None = None) -> torch.Tensor:
        return _forward(self, input, _transposed_output_padding(self, input, output_size))


class BooConvTranspose2d(nn.ConvTranspose2d):
    """torch.nn.ConvTranspose2d on a BOO kernel."""

    def forward(self, input: torch.Tensor, output_size: list[int] | None = None) -> torch.Tensor:
        return _forward(self, input, _transposed_output_padding(self, input, output_size))


class BooConvTranspose3d(nn.ConvTranspose3d):
    """torch.nn.ConvTranspose3d on a BOO kernel."""

    def forward(self, input: torch.Tensor, output_size: list[int] | None = None) -> torch.Tensor:
        return _forward(self, input, _transposed_output_padding(self, input, output_size))


#: torch.nn class -> its BOO counterpart (exact types: subclasses may change forward).
BOO_MODULES: dict[type[nn.Module], type[nn.Module]] = {
    nn.Conv1d: BooConv1d,
    nn.Conv2d: BooConv2d,
    nn.Conv3d: BooConv3d,
    nn.ConvTranspose1d: BooConvTranspose1d,
    nn.ConvTranspose2d: BooConvTranspose2d,
    nn.ConvTranspose3d: BooConvTranspose3d,
}


def convert_convs(model: nn.Module) -> nn.Module:
    """Make every torch.nn convolution in ``model`` (itself included) run on BOO kernels.

    In place: each module keeps its parameters, buffers and hooks (an optimizer built
    before still holds the same tensors); only its class, and so its ``forward``, changes.
    Modules of other classes, subclasses of the torch.nn convolutions included, are left
    alone. Returns ``model``.
    """
    converted = 0
    for module in model.modules():
        boo_class = BOO_MODULES.get(type(module))
        if boo_class is not None:
            module.__class__ = boo_class
            converted += 1
    logger.info("convert_convs: %d convolutions now run on BOO kernels", converted)
    return model
