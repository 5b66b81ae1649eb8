"""RMSNormSignature: one RMS-norm kernel (forward or backward), completely described."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from boo_core.plugin import (
    Signature,
    TensorSpec,
    UnsupportedError,
    number_symbol,
    require_choice,
    require_finite,
    require_positive,
    require_representable,
    short_name,
)

from . import compute

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
MODES = ("fwd", "bwd")
#: The dtype of the saved statistic, whatever the data's.
RSTD_DTYPE = torch.float32


@dataclass(frozen=True)
class RMSNormSignature(Signature):
    """RMS normalization of ``rows`` vectors of ``size`` elements, with a weight of ``size``.

    ``mode="fwd"``: takes ``(x, weight)``, returns ``(y, rstd)``: ``y = x * rstd * weight``
    in ``dtype`` and ``rstd = 1 / sqrt(mean(x^2) + eps)``, one float32 per row, the
    statistic the backward takes. ``mode="bwd"``: takes ``(dy, x, weight, rstd)``, returns
    ``(dx, dweight)`` in ``dtype``. ``torch.nn.functional.rms_norm(x, (size,), weight, eps)``
    is the forward's ``y``.
    """

    op_name: ClassVar[str] = "rmsnorm"

    rows: int
    size: int
    eps: float = 1e-5
    dtype: torch.dtype = torch.float32
    mode: str = "fwd"

    def __post_init__(self) -> None:
        require_positive(self, "rows", "size")
        require_finite(self, "eps")
        object.__setattr__(self, "eps", float(self.eps))  # 0 and 0.0: one kernel, one name
        if self.eps < 0:
            raise ValueError(f"eps {self.eps} must not be negative")
        require_representable(self, RSTD_DTYPE, "eps")  # added to the mean square in float32
        require_choice(self, "mode", MODES)
        if self.dtype not in DTYPES:
            raise UnsupportedError(f"rmsnorm dtype {self.dtype} is not supported; use float32, float16 or bfloat16")

    # -- Signature contract -----------------------------------------------------------------------

    def readable_name(self) -> str:
        return (f"rmsnorm_{self.mode}_{short_name(self.dtype)}_r{self.rows}_n{self.size}_"
                f"eps{number_symbol(self.eps)}")

    def input_specs(self) -> list[TensorSpec]:
        x = TensorSpec("x", (self.rows, self.size), self.dtype)
        weight = TensorSpec("weight", (self.size,), self.dtype)
        if self.mode == "fwd":
            return [x, weight]
        return [TensorSpec("dy", (self.rows, self.size), self.dtype), x, weight,
                TensorSpec("rstd", (self.rows,), RSTD_DTYPE)]

    def output_specs(self) -> list[TensorSpec]:
        if self.mode == "fwd":
            return [TensorSpec("y", (self.rows, self.size), self.dtype), TensorSpec("rstd", (self.rows,), RSTD_DTYPE)]
        return [TensorSpec("dx", (self.rows, self.size), self.dtype), TensorSpec("dweight", (self.size,), self.dtype)]

    def reference(self, *args: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The one-pass computation (:mod:`.compute`): the ``default`` formulation's source."""
        if self.mode == "fwd":
            return compute.forward(*args, self.eps)
        return compute.backward(*args)

    def eager(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The forward with PyTorch's own fused kernel (``boo driver``'s torch baseline);
        the backward with the reference (``aten._fused_rms_norm_backward`` is GPU-only)."""
        if self.mode == "bwd":
            return self.reference(*args)
        x, weight = args
        y, rstd = torch.ops.aten._fused_rms_norm(x, [self.size], weight, self.eps)
        return y, rstd.reshape(self.rows).to(RSTD_DTYPE)

    def get_sample_args(self, *, device: str | torch.device = "cpu", seed: int | None = None,
                        splat_value: float | None = None) -> tuple[torch.Tensor, ...]:
        """Random inputs; the backward's rstd is x's own (computed in float64), as a forward
        would have saved it."""
        args = super().get_sample_args(device=device, seed=seed, splat_value=splat_value)
        if self.mode == "fwd" or splat_value is not None:
            return args
        dy, x, weight, _ = args
        with torch.no_grad():
            _, rstd = compute.forward(x.double(), weight.double(), self.eps)
        return dy, x, weight, rstd.to(RSTD_DTYPE)

    @property
    def flops(self) -> int:
        """Per element: forward 4 (square, sum, two products); backward 10 (dx 7, dweight 3)."""
        return (4 if self.mode == "fwd" else 10) * self.rows * self.size

    @property
    def accumulation_length(self) -> int:
        """A row's terms for rstd and dx, a column's (``rows``) for dweight."""
        return self.size if self.mode == "fwd" else max(self.rows, self.size)
