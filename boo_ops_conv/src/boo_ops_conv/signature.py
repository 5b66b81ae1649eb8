"""ConvSignature: one convolution kernel, completely described."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import InitVar, dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from boo_core import Signature, TensorSpec, UnsupportedError
from boo_core.dtypes import short_name

from . import layouts

_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


def _per_dim(value: int | Sequence[int], rank: int, name: str) -> tuple[int, ...]:
    if isinstance(value, int):
        return (value,) * rank
    value = tuple(int(v) for v in value)
    if len(value) != rank:
        raise ValueError(f"{name} has {len(value)} values, the convolution has {rank} spatial dims")
    return value


@dataclass(frozen=True)
class ConvSignature(Signature):
    """A forward convolution.

    ``input_shape`` is logical (N, C, H, W) and ``kernel_shape`` logical
    (K, C/groups, Y, X), whatever the layouts, as MIOpenDriver defines lengths. Each
    tensor's layout (``input_layout``, ``kernel_layout``, ``output_layout``) sets the
    shape it is passed in: an NHWC input is a tensor of shape (N, H, W, C).
    ``shared_layout`` sets all three at once; an explicit per-tensor layout wins over it.

    The launchable takes ``(x, w)``, or ``(x, w, b)`` with ``bias=True`` (b of shape (K,)),
    and returns y.
    """

    op_name: ClassVar[str] = "conv"

    input_shape: tuple[int, ...]
    kernel_shape: tuple[int, ...]
    stride: tuple[int, ...] = 1  # type: ignore[assignment]
    padding: tuple[int, ...] = 0  # type: ignore[assignment]
    dilation: tuple[int, ...] = 1  # type: ignore[assignment]
    groups: int = 1
    dtype: torch.dtype = torch.float32
    input_layout: str = None  # type: ignore[assignment]
    kernel_layout: str = None  # type: ignore[assignment]
    output_layout: str = None  # type: ignore[assignment]
    bias: bool = False
    shared_layout: InitVar[str | None] = None

    def __post_init__(self, shared_layout: str | None) -> None:
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731 (frozen)
        set_("input_shape", tuple(int(d) for d in self.input_shape))
        set_("kernel_shape", tuple(int(d) for d in self.kernel_shape))
        rank = len(self.input_shape) - 2
        if rank != 2:
            raise UnsupportedError(f"{rank}-D convolution is not supported yet (input shape "
                                   f"{self.input_shape}); only 2-D")
        if len(self.kernel_shape) != rank + 2:
            raise ValueError(f"kernel_shape {self.kernel_shape} does not match input_shape {self.input_shape}")
        for name in ("stride", "padding", "dilation"):
            set_(name, _per_dim(getattr(self, name), rank, name))
        default = (shared_layout or layouts.LOGICAL[rank]).upper()
        for name in ("input_layout", "kernel_layout", "output_layout"):
            layout = (getattr(self, name) or default).upper()
            if not layouts.is_layout(layout, rank):
                raise UnsupportedError(f"{name} {layout!r} is not a {rank}-D layout "
                                       f"(a permutation of {layouts.LOGICAL[rank]})")
            set_(name, layout)
        if self.dtype not in _FLOAT_DTYPES:
            raise UnsupportedError(f"conv dtype {self.dtype} is not supported; use float32, float16 or bfloat16")
        self._validate()

    def _validate(self) -> None:
        n, c, *spatial = self.input_shape
        k, c_per_group, *window = self.kernel_shape
        if min(self.input_shape) < 1 or min(self.kernel_shape) < 1:
            raise ValueError(f"sizes must be positive: input {self.input_shape}, kernel {self.kernel_shape}")
        if self.groups < 1 or c % self.groups or k % self.groups:
            raise ValueError(f"groups={self.groups} must divide input channels {c} and output channels {k}")
        if c_per_group * self.groups != c:
            raise ValueError(f"kernel has {c_per_group} input channels per group; input has {c} channels "
                             f"in {self.groups} groups, so {c // self.groups} per group")
        if min(self.stride) < 1 or min(self.dilation) < 1 or min(self.padding) < 0:
            raise ValueError(f"need stride >= 1, dilation >= 1, padding >= 0: {self.stride}, "
                             f"{self.dilation}, {self.padding}")
        if min(self.output_spatial) < 1:
            raise ValueError(f"input {tuple(spatial)} with window {tuple(window)}, padding {self.padding}, "
                             f"dilation {self.dilation} leaves no output")

    # -- geometry -------------------------------------------------------------------------------

    @property
    def spatial_rank(self) -> int:
        return len(self.input_shape) - 2

    @property
    def output_spatial(self) -> tuple[int, ...]:
        return tuple(
            (size + 2 * pad - dil * (win - 1) - 1) // s + 1
            for size, win, s, pad, dil in zip(self.input_shape[2:], self.kernel_shape[2:], self.stride,
                                              self.padding, self.dilation))

    @property
    def output_shape(self) -> tuple[int, ...]:
        """Logical (N, K, Ho, Wo)."""
        return (self.input_shape[0], self.kernel_shape[0], *self.output_spatial)

    # -- Signature contract -----------------------------------------------------------------------

    def readable_name(self) -> str:
        def dims(letters: str, shape: Sequence[int]) -> str:
            return "".join(f"{letter}{size}" for letter, size in zip(letters, shape))

        rank = self.spatial_rank
        parts = [
            f"conv{rank}d_fwd_{short_name(self.dtype)}",
            dims("nc" + "dhw"[3 - rank:], self.input_shape),
            dims("kc" + "zyx"[3 - rank:], self.kernel_shape),
            "s" + "x".join(map(str, self.stride)),
            "p" + "x".join(map(str, self.padding)),
            "d" + "x".join(map(str, self.dilation)),
            f"g{self.groups}",
            f"{self.input_layout}_{self.kernel_layout}_{self.output_layout}".lower(),
        ]
        if self.bias:
            parts.append("bias")
        return "_".join(parts)

    def input_specs(self) -> list[TensorSpec]:
        specs = [
            TensorSpec("x", layouts.physical_shape(self.input_shape, self.input_layout), self.dtype,
                       self.input_layout),
            TensorSpec("w", layouts.physical_shape(self.kernel_shape, self.kernel_layout), self.dtype,
                       self.kernel_layout),
        ]
        if self.bias:
            specs.append(TensorSpec("b", (self.kernel_shape[0],), self.dtype))
        return specs

    def output_specs(self) -> list[TensorSpec]:
        return [TensorSpec("y", layouts.physical_shape(self.output_shape, self.output_layout), self.dtype,
                           self.output_layout)]

    def reference(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
        x = _permute(x, layouts.to_logical(self.input_layout))
        w = _permute(w, layouts.to_logical(self.kernel_layout))
        y = _CONV[self.spatial_rank](x, w, b, self.stride, self.padding, self.dilation, self.groups)
        return _permute(y, layouts.to_physical(self.output_layout))

    @property
    def flops(self) -> int:
        outputs = math.prod(self.output_shape)
        return 2 * outputs * self.accumulation_length + (outputs if self.bias else 0)

    @property
    def accumulation_length(self) -> int:
        return math.prod(self.kernel_shape[1:])

    def to_command(self) -> str:
        from .parser import format_conv_command

        return format_conv_command(self)


def _permute(t: torch.Tensor, permutation: tuple[int, ...]) -> torch.Tensor:
    return t if layouts.is_identity(permutation) else t.permute(permutation)
