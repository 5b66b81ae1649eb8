"""How a batch norm's tensors are laid out for its kernels: a channels-last input is passed
as the (N, *spatial, C) tensor its memory holds (a view, no copy), everything else
contiguous; results come back as views with the caller's layout."""

from __future__ import annotations

import torch

from .signature import BatchNormSignature


def is_channels_last(x: torch.Tensor) -> bool:
    """Whether ``x`` is a 4-D or 5-D tensor in channels-last memory (and not also contiguous)."""
    if x.dim() not in (4, 5) or x.is_contiguous():
        return False
    return x.is_contiguous(memory_format=memory_format_of(x, channels_last=True))


def memory_format_of(x: torch.Tensor, *, channels_last: bool | None = None) -> torch.memory_format:
    """``x``'s memory format (``channels_last``: the channels-last one for its rank)."""
    if channels_last is None:
        channels_last = is_channels_last(x)
    if not channels_last:
        return torch.contiguous_format
    return torch.channels_last if x.dim() == 4 else torch.channels_last_3d


def stored(x: torch.Tensor, signature: BatchNormSignature) -> torch.Tensor:
    """``x`` as the kernel takes it: (N, *spatial, C) for channels-last (a view), else contiguous."""
    if signature.channels_last:
        return x.permute(0, *range(2, x.dim()), 1)
    return x.contiguous()


def logical(y: torch.Tensor, signature: BatchNormSignature) -> torch.Tensor:
    """A stored result as the (N, C, *spatial) tensor it is (a view: channels-last strides)."""
    if signature.channels_last:
        return y.permute(0, y.dim() - 1, *range(1, y.dim() - 1))
    return y
