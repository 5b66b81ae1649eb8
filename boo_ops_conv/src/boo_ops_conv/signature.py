"""ConvSignature: one convolution kernel (any mode, rank, layout), completely described."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import InitVar, dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from boo_core import Signature, TensorSpec, UnsupportedError
from boo_core.signatures.dtypes import short_name
from boo_core.signatures.flags import INT32_MAX

from . import layouts

#: What each mode computes and takes: fwd (x, w[, b]) -> y; bwd, the data gradient,
#: (dy, w) -> dx; wrw, the weight gradient, (dy, x) -> dw; bwd_bias, the bias gradient, (dy) -> db.
MODES = ("fwd", "bwd", "wrw", "bwd_bias")

#: Activations that fuse into a forward convolution (applied after the bias).
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu,
    "gelu": F.gelu,
    "silu": F.silu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
}

_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _per_dim(value: int | Sequence[int], rank: int, name: str) -> tuple[int, ...]:
    if isinstance(value, int):
        return (value,) * rank
    value = tuple(int(v) for v in value)
    if len(value) != rank:
        raise ValueError(f"{name} has {len(value)} values, the convolution has {rank} spatial dims")
    return value


def _set(obj: object, name: str, value: object) -> None:
    object.__setattr__(obj, name, value)  # the dataclass is frozen; __post_init__ normalizes



def same_padding(size: int, window: int, stride: int) -> int:
    """MIOpen's padding for ``--pad_mode same`` along one axis: a symmetric floor of
    TensorFlow's SAME padding."""
    return max(window - (stride if size % stride == 0 else size % stride), 0) // 2

@dataclass(frozen=True)
class ConvSignature(Signature):
    """A convolution in one mode, of any spatial rank (1, 2 or 3), maybe transposed.

    Lengths are logical, as MIOpenDriver defines them, whatever the layouts:
    ``input_shape`` is (N, C, *spatial) and ``kernel_shape`` is (K, C/groups, *window), or,
    for a transposed convolution, (C, K/groups, *window) (torch's and MIOpen's convention).
    Each tensor's layout sets the shape it is passed in: an NHWC input is a tensor of
    shape (N, H, W, C); a layout is any permutation of the logical letters (NCW, NCHW,
    NCDHW), the filter using N for its first logical dim and C for its second.
    ``shared_layout`` sets all three layouts at once; an explicit one wins over it.

    Calling conventions by ``mode`` (see :data:`MODES`): fwd takes (x, w), or (x, w, b)
    with ``bias=True``, and returns y, with ``activation`` applied last; bwd takes (dy, w)
    and returns dx; wrw takes (dy, x) and returns dw; bwd_bias takes (dy) and returns db.
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
    mode: str = "fwd"
    transposed: bool = False
    output_padding: tuple[int, ...] = 0  # type: ignore[assignment]
    activation: str | None = None
    shared_layout: InitVar[str | None] = None

    def __post_init__(self, shared_layout: str | None) -> None:
        _set(self, "input_shape", tuple(int(d) for d in self.input_shape))
        _set(self, "kernel_shape", tuple(int(d) for d in self.kernel_shape))
        rank = len(self.input_shape) - 2
        if rank not in layouts.LOGICAL:
            raise UnsupportedError(f"{rank}-D convolution is not supported (input shape {self.input_shape}); "
                                   "1-D, 2-D and 3-D are")
        if len(self.kernel_shape) != rank + 2:
            raise ValueError(f"kernel_shape {self.kernel_shape} does not match input_shape {self.input_shape}")
        for name in ("stride", "padding", "dilation", "output_padding"):
            _set(self, name, _per_dim(getattr(self, name), rank, name))
        default = (shared_layout or layouts.LOGICAL[rank]).upper()
        for name in ("input_layout", "kernel_layout", "output_layout"):
            layout = (getattr(self, name) or default).upper()
            if not layouts.is_layout(layout, rank):
                raise UnsupportedError(f"{name} {layout!r} is not a {rank}-D layout "
                                       f"(a permutation of {layouts.LOGICAL[rank]})")
            _set(self, name, layout)
        if self.dtype not in _FLOAT_DTYPES:
            raise UnsupportedError(f"conv dtype {self.dtype} is not supported; use float32, float16 or bfloat16")
        if self.mode not in MODES:
            raise ValueError(f"mode {self.mode!r} is not one of {', '.join(MODES)}")
        if self.bias and self.mode != "fwd":
            raise ValueError(f"bias=True describes a forward input; mode {self.mode!r} takes none "
                             "(the bias gradient is mode 'bwd_bias')")
        if self.activation is not None:
            if self.activation not in ACTIVATIONS:
                raise UnsupportedError(f"activation {self.activation!r} is not supported; "
                                       f"use one of {', '.join(ACTIVATIONS)}")
            if self.mode != "fwd":
                raise UnsupportedError(f"activation fuses into the forward convolution only, not mode {self.mode!r}")
        self._validate()

    def _validate(self) -> None:
        n, c, *spatial = self.input_shape
        if min(self.input_shape) < 1 or min(self.kernel_shape) < 1:
            raise ValueError(f"sizes must be positive: input {self.input_shape}, kernel {self.kernel_shape}")
        if self.groups < 1:
            raise ValueError(f"groups must be at least 1, got {self.groups}")
        expected_c = self.kernel_shape[0] if self.transposed else self.kernel_shape[1] * self.groups
        if c != expected_c or c % self.groups or self.output_channels % self.groups:
            what = "kernel_shape[0]" if self.transposed else "kernel_shape[1] * groups"
            raise ValueError(f"input channels {c} must equal {what} = {expected_c}, and groups={self.groups} "
                             f"must divide input channels {c} and output channels {self.output_channels}")
        if min(self.stride) < 1 or min(self.dilation) < 1 or min(self.padding) < 0 or min(self.output_padding) < 0:
            raise ValueError(f"need stride >= 1, dilation >= 1, padding >= 0, output_padding >= 0: "
                             f"{self.stride}, {self.dilation}, {self.padding}, {self.output_padding}")
        if not self.transposed and any(self.output_padding):
            raise ValueError("output_padding applies to transposed convolutions only")
        for op, s, d in zip(self.output_padding, self.stride, self.dilation):
            if op and op >= s and op >= d:
                raise ValueError(f"output_padding {self.output_padding} must be smaller than the stride "
                                 f"{self.stride} or the dilation {self.dilation}")
        if min(self.output_spatial) < 1:
            raise ValueError(f"input {tuple(spatial)} with window {self.window}, padding {self.padding}, "
                             f"stride {self.stride}, dilation {self.dilation} leaves no output")
        for index, size in enumerate(self.output_spatial):
            if size > INT32_MAX:  # MIOpen's sizes are C ints, and so are kernels' launch sizes
                raise ValueError(f"output spatial dimension {index} is {size} (input {tuple(spatial)}, window "
                                 f"{self.window}, padding {self.padding}, stride {self.stride}): above 2**31-1")

    # -- geometry -------------------------------------------------------------------------------

    @property
    def spatial_rank(self) -> int:
        return len(self.input_shape) - 2

    @property
    def window(self) -> tuple[int, ...]:
        return self.kernel_shape[2:]

    @property
    def output_channels(self) -> int:
        return self.kernel_shape[1] * self.groups if self.transposed else self.kernel_shape[0]

    @property
    def output_spatial(self) -> tuple[int, ...]:
        sizes = zip(self.input_shape[2:], self.window, self.stride, self.padding, self.dilation, self.output_padding)
        if self.transposed:
            return tuple(s * (n - 1) + d * (f - 1) + 1 - 2 * p + op for n, f, s, p, d, op in sizes)
        return tuple((n + 2 * p - d * (f - 1) - 1) // s + 1 for n, f, s, p, d, _ in sizes)

    @property
    def read_extents(self) -> tuple[int, ...]:
        """Per spatial axis, how much of the padded input the windows read (of an ordinary,
        not transposed, convolution): less than the padded input where the last stride stops
        short of its end."""
        axes = zip(self.output_spatial, self.stride, self.dilation, self.window)
        return tuple((o - 1) * st + d * (f - 1) + 1 for o, st, d, f in axes)

    @property
    def output_shape(self) -> tuple[int, ...]:
        """Logical (N, K, *output spatial) of the forward convolution."""
        return (self.input_shape[0], self.output_channels, *self.output_spatial)

    def _tensor(self, name: str, which: str) -> TensorSpec:
        shape, layout = {
            "x": (self.input_shape, self.input_layout),
            "w": (self.kernel_shape, self.kernel_layout),
            "y": (self.output_shape, self.output_layout),
        }[which]
        return TensorSpec(name, layouts.physical_shape(shape, layout), self.dtype, layout)

    def _bias_spec(self, name: str) -> TensorSpec:
        return TensorSpec(name, (self.output_channels,), self.dtype)

    # -- Signature contract -----------------------------------------------------------------------

    def readable_name(self) -> str:
        rank = self.spatial_rank
        spatial, window = "dhw"[3 - rank:], "zyx"[3 - rank:]

        def dims(letters: str, shape: Sequence[int]) -> str:
            return "".join(f"{letter}{size}" for letter, size in zip(letters, shape))

        kernel_letters = ("ck" if self.transposed else "kc") + window
        parts = [
            f"conv{rank}d{'t' if self.transposed else ''}_{self.mode}_{short_name(self.dtype)}",
            dims("nc" + spatial, self.input_shape),
            dims(kernel_letters, self.kernel_shape),
            "s" + "x".join(map(str, self.stride)),
            "p" + "x".join(map(str, self.padding)),
            "d" + "x".join(map(str, self.dilation)),
            f"g{self.groups}",
        ]
        if any(self.output_padding):
            parts.append("op" + "x".join(map(str, self.output_padding)))
        parts.append(f"{self.input_layout}_{self.kernel_layout}_{self.output_layout}".lower())
        if self.bias:
            parts.append("bias")
        if self.activation:
            parts.append(self.activation)
        return "_".join(parts)

    def input_specs(self) -> list[TensorSpec]:
        if self.mode == "fwd":
            specs = [self._tensor("x", "x"), self._tensor("w", "w")]
            return specs + [self._bias_spec("b")] if self.bias else specs
        if self.mode == "bwd":
            return [self._tensor("dy", "y"), self._tensor("w", "w")]
        if self.mode == "wrw":
            return [self._tensor("dy", "y"), self._tensor("x", "x")]
        return [self._tensor("dy", "y")]

    def output_specs(self) -> list[TensorSpec]:
        return [{
            "fwd": lambda: self._tensor("y", "y"),
            "bwd": lambda: self._tensor("dx", "x"),
            "wrw": lambda: self._tensor("dw", "w"),
            "bwd_bias": lambda: self._bias_spec("db"),
        }[self.mode]()]

    def reference(self, *args: torch.Tensor) -> torch.Tensor:
        to_logical = {"x": layouts.to_logical(self.input_layout), "w": layouts.to_logical(self.kernel_layout),
                      "y": layouts.to_logical(self.output_layout)}
        if self.mode == "fwd":
            return self._forward(*args)
        dy = layouts.permute(args[0], to_logical["y"])
        if self.mode == "bwd_bias":  # accumulate in float32 at least, as torch does for half types
            accumulate = torch.promote_types(dy.dtype, torch.float32)
            total = dy.sum(dim=[d for d in range(dy.dim()) if d != 1], dtype=accumulate)
            return total.to(dy.dtype)
        if self.mode == "bwd":
            w = layouts.permute(args[1], to_logical["w"])
            # The data gradient of a conv is the transposed conv with the same weight, and the
            # adjoint of a transposed conv is the ordinary conv. The output padding restores
            # the input rows a strided conv never reads, which dy's size alone cannot tell.
            output_padding = (0,) * self.spatial_rank if self.transposed else self._data_grad_output_padding()
            dx = self._convolution(dy, w, None, not self.transposed, output_padding)
            if self.transposed:  # an output padding of a stride or more gives the adjoint conv extra rows
                dx = dx[(slice(None), slice(None), *(slice(0, n) for n in self.input_shape[2:]))]
            return layouts.permute(dx, layouts.to_physical(self.input_layout))
        x = layouts.permute(args[1], to_logical["x"])
        w = _placeholder(dy, self.kernel_shape)
        # A transposed conv's weight gradient is its adjoint conv's, with dy and x trading places.
        # With an output padding of a stride or more, that conv of dy has more rows than x:
        # x gets zero rows for them (they would multiply nothing).
        if self.transposed:
            extra = [(size - 1) // stride + 1 - n for size, stride, n in
                     zip(self._adjoint_extents(), self.stride, self.input_shape[2:])]
            if any(extra):
                x = torch.nn.functional.pad(x, [p for e in reversed(extra) for p in (0, e)])
        grad_output, input = (x, dy) if self.transposed else (dy, x)
        dw = torch.ops.aten.convolution_backward(
            grad_output, input, w, None, list(self.stride), list(self.padding), list(self.dilation), False,
            [0] * self.spatial_rank, self.groups, [False, True, False])[1]
        return layouts.permute(dw, layouts.to_physical(self.kernel_layout))

    def _forward(self, x: torch.Tensor, w: torch.Tensor, *b: torch.Tensor, widen: bool = True) -> torch.Tensor:
        x = layouts.permute(x, layouts.to_logical(self.input_layout))
        w = layouts.permute(w, layouts.to_logical(self.kernel_layout))
        y = self._convolution(x, w, b[0] if b else None, self.transposed, self.output_padding, widen=widen)
        if self.activation:
            y = ACTIVATIONS[self.activation](y)
        return layouts.permute(y, layouts.to_physical(self.output_layout))

    def eager(self, *args: torch.Tensor) -> torch.Tensor:
        """PyTorch's own kernel, as a model runs it: the convolution as it is (the reference
        widens a 3-D depthwise one for IREE), and a data gradient as ``convolution_backward``
        (what autograd runs; cuDNN's data-gradient kernels on a GPU), not the reference's
        transposed convolution, which for a depthwise conv also doubles the output channels:
        cuDNN took about 6x the time of a real backward's on ConvNeXt-T's layers."""
        if self.mode == "fwd":
            return self._forward(*args, widen=False)
        if self.mode != "bwd":
            return self.reference(*args)
        dy = layouts.permute(args[0], layouts.to_logical(self.output_layout))
        w = layouts.permute(args[1], layouts.to_logical(self.kernel_layout))
        # x is never read, but its strides say which memory format cuDNN runs in
        x = layouts.permute(dy.new_empty(layouts.physical_shape(self.input_shape, self.input_layout)),
                            layouts.to_logical(self.input_layout))
        dx = torch.ops.aten.convolution_backward(
            dy, x, w, None, list(self.stride), list(self.padding), list(self.dilation), self.transposed,
            list(self.output_padding), self.groups, [True, False, False])[0]
        return layouts.permute(dx, layouts.to_physical(self.input_layout))

    def _convolution(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, transposed: bool,
                     output_padding: tuple[int, ...], widen: bool = True) -> torch.Tensor:
        """aten.convolution with this signature's stride, padding, dilation and groups.

        IREE 3.13 fails to compile depthwise convolutions (one input and one output channel
        per group, groups > 1) when transposed, in any rank (so every depthwise conv's data
        gradient), and when 3-D. Giving each group a second, all-zero output channel makes a
        shape it compiles; the extra channels are dropped. Exact, at twice the multiply-adds
        (``widen=False``: the convolution as it is, for PyTorch to run).
        """
        depthwise = self.groups > 1 and w.shape[0] == self.groups and w.shape[1] == 1
        if not (widen and depthwise and (transposed or self.spatial_rank == 3)):
            return torch.ops.aten.convolution(x, w, b, list(self.stride), list(self.padding), list(self.dilation),
                                              transposed, list(output_padding), self.groups)
        zeros = torch.zeros_like(w)
        # Filters are (in, out/groups, ...) when transposed, (out, in/groups, ...) otherwise.
        widened = torch.cat([w, zeros], dim=1) if transposed else torch.stack([w, zeros], dim=1).flatten(0, 1)
        y = torch.ops.aten.convolution(x, widened, None, list(self.stride), list(self.padding), list(self.dilation),
                                       transposed, list(output_padding), self.groups)[:, 0::2]
        return y if b is None else y + b.reshape(-1, *(1,) * self.spatial_rank)

    def _adjoint_extents(self) -> tuple[int, ...]:
        """Per axis, a transposed conv's output length padded and less the window's reach:
        what the ordinary conv of its output steps over."""
        return tuple(out + 2 * p - d * (f - 1) for out, p, d, f in
                     zip(self.output_spatial, self.padding, self.dilation, self.window))

    def _data_grad_output_padding(self) -> tuple[int, ...]:
        return tuple((n + 2 * p - d * (f - 1) - 1) % s for n, f, s, p, d in
                     zip(self.input_shape[2:], self.window, self.stride, self.padding, self.dilation))

    @property
    def macs(self) -> int:
        """Multiply-accumulates of the convolution (the same in every mode but bwd_bias)."""
        n, c = self.input_shape[:2]
        window = math.prod(self.window)
        if self.transposed:  # each input element scatters into K/g outputs per window tap
            return n * c * math.prod(self.input_shape[2:]) * (self.output_channels // self.groups) * window
        return math.prod(self.output_shape) * (c // self.groups) * window

    @property
    def flops(self) -> int:
        outputs = math.prod(self.output_shape)
        if self.mode == "bwd_bias":
            return outputs
        epilogue = outputs * (int(self.bias) + int(self.activation is not None)) if self.mode == "fwd" else 0
        return 2 * self.macs + epilogue

    @property
    def accumulation_length(self) -> int:
        n, c = self.input_shape[:2]
        window = math.prod(self.window)
        small_side = self.input_shape[2:] if self.transposed else self.output_spatial
        if self.mode in ("wrw", "bwd_bias"):  # sums over the batch and the smaller image
            return n * math.prod(small_side)
        channels = c // self.groups if self.mode == "fwd" else self.output_channels // self.groups
        return channels * window


def _placeholder(like: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """A tensor of ``shape`` whose values are never read (convolution_backward needs only its
    shape for the gradient it does not compute). An expanded scalar costs no memory and,
    unlike ``empty``, exports."""
    return like.new_zeros(1).expand(shape)
