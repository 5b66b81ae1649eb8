"""ConvBatchNormActivationSignature: MIOpen's CBAInfer, an inference fusion of a 2-D
convolution, its bias, a batch norm and an activation, as one kernel."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from boo_core import Signature, TensorSpec, UnsupportedError
from boo_core.signatures.dtypes import short_name
from boo_core.signatures.signature import number_symbol, require_choice, require_finite, require_positive

from . import layouts
from .signature import same_padding

#: MIOpen's ``-F/--fusion_mode`` values 0..6, in order: which of conv (c), bias (b), batch
#: norm (n) and activation (a) run.
FUSION_MODES = ("cbna", "cna", "na", "cn", "cba", "ca", "cb")
#: MIOpen's ``-M/--bnMode`` values 0, 1: one statistic per (channel, pixel), or per channel.
BN_MODES = ("per_activation", "spatial")
#: MIOpen's ``-m/--activMode`` values 0..9 (``miopenActivationMode_t``).
ACTIVATION_MODES = ("passthru", "logistic", "tanh", "relu", "softrelu", "abs", "power", "clippedrelu",
                    "leakyrelu", "elu")
PAD_MODES = ("default", "same", "valid")
#: Layouts of x, the filter and y (BOO extension: MIOpen's CBAInfer is NCHW only). NHWC
#: stores the filter as (K, Y, X, C/groups), as conv's ``--fil_layout NHWC`` does.
LAYOUTS = ("NCHW", "NHWC")
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
#: The batch norm's epsilon: MIOpenDriver's CBAInfer has no flag for it and uses 1e-3.
EPSILON = 1e-3
#: A conv stage: ``(x, w, b or None) -> y``, NCHW.
Convolution = Callable[[torch.Tensor, torch.Tensor, "torch.Tensor | None"], torch.Tensor]


def miopen_activation(mode: str, alpha: float, beta: float, gamma: float) -> Callable[[torch.Tensor], torch.Tensor]:
    """MIOpen's activation ``mode`` with its parameters, as a function of a tensor."""
    return {
        "passthru": lambda x: x,
        "logistic": torch.sigmoid,
        "tanh": lambda x: beta * torch.tanh(alpha * x),
        "relu": torch.relu,
        "softrelu": lambda x: torch.log1p(torch.exp(x)),
        "abs": torch.abs,
        "power": lambda x: torch.pow(alpha + beta * x, gamma),
        "clippedrelu": lambda x: torch.clamp(x, min=0.0, max=alpha),
        "leakyrelu": lambda x: torch.where(x > 0, x, alpha * x),
        "elu": lambda x: torch.where(x > 0, x, alpha * torch.expm1(x)),
    }[mode]


@dataclass(frozen=True)
class ConvBatchNormActivationSignature(Signature):
    """``act(batch_norm(conv(x, w) + b))`` in inference, NCHW, as MIOpen's CBAInfer runs it.

    ``fusion`` says which stages run (``cbna`` all four; ``na`` only the batch norm and the
    activation, on x itself). The convolution is 2-D with ``groups``, padding by
    ``pad_mode`` as MIOpenDriver computes it (``default``: ``pad_h``/``pad_w``; ``same``,
    ``valid``). The batch norm uses running statistics: ``y = (y - mean) / sqrt(var + eps) *
    scale + shift``, per channel (``spatial``) or per channel and pixel (``per_activation``),
    its tensors in the data's dtype as MIOpen's are. The activation is MIOpen's, with its
    alpha, beta and gamma. The convolution and its bias run in the data's dtype as PyTorch's
    do (accumulated in float32, rounded to the dtype: what the conv op's kernels compute);
    the batch norm and the activation are computed from that in float32 and rounded once.
    ``layout`` NHWC (a BOO extension, what torch.compile hands over for a channels-last
    model) stores x, the filter and y channels-last; the batch norm's tensors keep their
    logical shapes. ``residual`` (a BOO extension: a ResNet block's skip connection) adds a
    last input ``r`` of y's shape and layout before the activation, in float32:
    ``y = act(batch_norm(conv(x, w) + b) + r)``.
    """

    op_name: ClassVar[str] = "cbainfer"

    n: int
    c: int
    h: int
    w: int
    k: int = 32
    fil_h: int = 3
    fil_w: int = 3
    stride_h: int = 1
    stride_w: int = 1
    pad_h: int = 0
    pad_w: int = 0
    dilation_h: int = 1
    dilation_w: int = 1
    groups: int = 1
    pad_mode: str = "default"
    fusion: str = "cbna"
    bn_mode: str = "per_activation"
    activation: str = "relu"
    alpha: float = 1.0
    beta: float = 0.0
    gamma: float = 1.0
    eps: float = EPSILON
    dtype: torch.dtype = torch.float32
    layout: str = "NCHW"
    residual: bool = False

    def __post_init__(self) -> None:
        require_positive(self, "n", "c", "h", "w", "k", "fil_h", "fil_w", "stride_h", "stride_w", "dilation_h",
                         "dilation_w", "groups")
        require_finite(self, "alpha", "beta", "gamma", "eps")
        require_choice(self, "fusion", FUSION_MODES)
        require_choice(self, "bn_mode", BN_MODES)
        require_choice(self, "activation", ACTIVATION_MODES)
        require_choice(self, "pad_mode", PAD_MODES)
        require_choice(self, "layout", LAYOUTS)
        if self.pad_h < 0 or self.pad_w < 0:
            raise ValueError(f"pad_h {self.pad_h} and pad_w {self.pad_w} must not be negative")
        if self.eps <= 0:
            raise ValueError(f"eps {self.eps} must be positive")
        if self.dtype not in DTYPES:
            raise UnsupportedError(f"CBAInfer dtype {self.dtype} is not supported; use float32, float16 or bfloat16")
        if self.has_conv:
            if self.c % self.groups or self.k % self.groups:
                raise ValueError(f"groups {self.groups} must divide c {self.c} and k {self.k}")
            if min(self.output_shape[2:]) < 1:
                raise ValueError(f"fil_h {self.fil_h} and fil_w {self.fil_w} (dilation {self.dilation_h}x"
                                 f"{self.dilation_w}) do not fit the padded {self.h}x{self.w} input")

    # -- what runs -------------------------------------------------------------------------------

    @property
    def has_conv(self) -> bool:
        return "c" in self.fusion

    @property
    def has_bias(self) -> bool:
        return "b" in self.fusion

    @property
    def has_norm(self) -> bool:
        return "n" in self.fusion

    @property
    def has_activation(self) -> bool:
        return "a" in self.fusion

    @property
    def padding(self) -> tuple[int, int]:
        """The padding the convolution uses, by MIOpenDriver's rule for ``pad_mode``."""
        if self.pad_mode == "valid":
            return 0, 0
        if self.pad_mode == "same":
            return same_padding(self.h, self.fil_h, self.stride_h), same_padding(self.w, self.fil_w, self.stride_w)
        return self.pad_h, self.pad_w

    @property
    def input_shape(self) -> tuple[int, int, int, int]:
        return (self.n, self.c, self.h, self.w)

    @property
    def output_shape(self) -> tuple[int, int, int, int]:
        if not self.has_conv:
            return self.input_shape
        (ph, pw) = self.padding
        p = (self.h + 2 * ph - self.dilation_h * (self.fil_h - 1) - 1) // self.stride_h + 1
        q = (self.w + 2 * pw - self.dilation_w * (self.fil_w - 1) - 1) // self.stride_w + 1
        return (self.n, self.k, p, q)

    @property
    def norm_shape(self) -> tuple[int, ...]:
        """The batch norm's scale, shift, mean and variance: (C,) or (C, H, W) of its input."""
        _, channels, *spatial = self.output_shape
        return (channels,) if self.bn_mode == "spatial" else (channels, *spatial)

    # -- Signature contract ----------------------------------------------------------------------

    def readable_name(self) -> str:
        (ph, pw) = self.padding
        conv = (f"_k{self.k}y{self.fil_h}x{self.fil_w}_s{self.stride_h}x{self.stride_w}_p{ph}x{pw}_"
                f"d{self.dilation_h}x{self.dilation_w}_g{self.groups}") if self.has_conv else ""
        norm = f"_{self.bn_mode}" if self.has_norm else ""
        parameters = "".join(f"_{letter}{number_symbol(value)}" for letter, value in
                             (("a", self.alpha), ("b", self.beta), ("g", self.gamma)))
        act = f"_{self.activation}{parameters}" if self.has_activation else ""
        eps = "" if self.eps == EPSILON else f"_e{number_symbol(self.eps)}"
        layout = "" if self.layout == "NCHW" else f"_{self.layout.lower()}"
        residual = "_residual" if self.residual else ""
        return (f"cbainfer_{self.fusion}_{short_name(self.dtype)}_n{self.n}c{self.c}h{self.h}w{self.w}{conv}{norm}"
                f"{eps}{residual}{act}{layout}")

    def input_specs(self) -> list[TensorSpec]:
        specs = [self._stored("x", self.input_shape)]
        if self.has_conv:
            specs.append(self._stored("w", (self.k, self.c // self.groups, self.fil_h, self.fil_w)))
        if self.has_bias:
            specs.append(TensorSpec("b", (self.k,), self.dtype))
        if self.has_norm:
            specs += [TensorSpec(name, self.norm_shape, self.dtype) for name in ("scale", "shift", "mean", "var")]
        if self.residual:
            specs.append(self._stored("r", self.output_shape))
        return specs

    def output_specs(self) -> list[TensorSpec]:
        return [self._stored("y", self.output_shape)]

    def _stored(self, name: str, shape: tuple[int, ...]) -> TensorSpec:
        """x, the filter or y of logical ``shape`` as ``layout`` stores it."""
        return TensorSpec(name, layouts.physical_shape(shape, self.layout), self.dtype, self.layout)

    def reference(self, *args: torch.Tensor) -> torch.Tensor:
        return self.compute(args)

    def compute(self, args: Sequence[torch.Tensor], convolution: Convolution | None = None) -> torch.Tensor:
        """The kernel's computation with ``convolution(x, w, b)`` for the conv stage (a
        formulation's; default ``F.conv2d`` with the signature's geometry)."""
        accumulate = torch.promote_types(args[0].dtype, torch.float32)
        logical = layouts.to_logical(self.layout)
        x, *rest = args
        y = layouts.permute(x, logical)
        if self.has_conv:
            weight = layouts.permute(rest.pop(0), logical)
            bias = rest.pop(0) if self.has_bias else None
            y = (convolution or self._conv2d)(y, weight, bias)
        y = y.to(accumulate)
        if self.has_norm:
            scale, shift, mean, var = (self._per_channel(t.to(accumulate)) for t in rest[:4])
            y = (y - mean) * torch.rsqrt(var + self.eps) * scale + shift
        if self.residual:
            y = y + layouts.permute(rest[-1], logical).to(accumulate)
        if self.has_activation:
            y = miopen_activation(self.activation, self.alpha, self.beta, self.gamma)(y)
        return layouts.permute(y, layouts.to_physical(self.layout)).to(args[0].dtype)

    def _conv2d(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return F.conv2d(x, weight, bias, (self.stride_h, self.stride_w), self.padding,
                        (self.dilation_h, self.dilation_w), self.groups)

    def _per_channel(self, t: torch.Tensor) -> torch.Tensor:
        """A batch-norm tensor shaped to broadcast over (N, C, H, W)."""
        return t.reshape(-1, 1, 1) if self.bn_mode == "spatial" else t

    def get_sample_args(self, *, device: str | torch.device = "cpu", seed: int | None = None,
                        splat_value: float | None = None) -> tuple[torch.Tensor, ...]:
        """Standard-normal tensors, except the variance: uniform in [0.5, 1.5]."""
        args = list(super().get_sample_args(device=device, seed=seed, splat_value=splat_value))
        if self.has_norm and splat_value is None:
            var = [spec.name for spec in self.input_specs()].index("var")
            args[var] = (args[var].float().abs() % 1 + 0.5).to(self.dtype)
        return tuple(args)

    @property
    def flops(self) -> int:
        outputs = math.prod(self.output_shape)
        conv = 2 * outputs * (self.c // self.groups) * self.fil_h * self.fil_w if self.has_conv else 0
        return conv + outputs * (self.has_bias + 4 * self.has_norm + self.residual + self.has_activation)

    @property
    def accumulation_length(self) -> int:
        return (self.c // self.groups) * self.fil_h * self.fil_w if self.has_conv else 1

