"""SoftmaxSignature: one MIOpen softmax kernel (forward or backward), completely described."""

from __future__ import annotations

import math
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
    short_name,
)

#: MIOpen's ``-a/--algorithm`` values 0, 1, 2, in order.
ALGORITHMS = ("fast", "accurate", "log")
#: MIOpen's ``-m/--mode`` values 0, 1, in order: what one softmax normalizes over.
SOFTMAX_MODES = ("instance", "channel")
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class SoftmaxSignature(Signature):
    """Softmax of an NCHW tensor, as MIOpen defines it.

    ``softmax_mode="channel"`` normalizes over C for each (n, h, w), ``"instance"`` over
    C·H·W for each n. ``algorithm="fast"`` is ``exp(x) / sum(exp(x))``; ``"accurate"``
    subtracts the maximum first (the same values, without overflow); ``"log"`` is
    log-softmax, ``x - max - log(sum(exp(x - max)))``.

    ``mode="fwd"``: the kernel takes ``x`` and returns ``y = alpha · softmax(x)``.
    ``mode="bwd"``: MIOpen's backward, from the forward's output: it takes ``(y, dy)`` and
    returns ``dx = alpha · y · (dy - sum(y · dy))``, or ``alpha · (dy - exp(y) · sum(dy))``
    for ``"log"``. MIOpen's ``beta`` adds ``beta`` times what the output held before; here
    that prior output is one more input (``y_prior``, ``dx_prior``) when beta is not 0.
    Everything is computed in float32 at least and rounded to ``dtype`` once.
    """

    op_name: ClassVar[str] = "softmax"

    n: int
    c: int
    h: int = 1
    w: int = 1
    algorithm: str = "accurate"
    softmax_mode: str = "channel"
    alpha: float = 1.0
    beta: float = 0.0
    dtype: torch.dtype = torch.float32
    mode: str = "fwd"

    def __post_init__(self) -> None:
        require_positive(self, "n", "c", "h", "w")
        require_finite(self, "alpha", "beta")
        require_choice(self, "algorithm", ALGORITHMS)
        require_choice(self, "softmax_mode", SOFTMAX_MODES)
        require_choice(self, "mode", ("fwd", "bwd"))
        if self.dtype not in DTYPES:
            raise UnsupportedError(f"softmax dtype {self.dtype} is not supported; use float32, float16 or bfloat16")

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (self.n, self.c, self.h, self.w)

    @property
    def _rows(self) -> tuple[int, int, int]:
        """The tensor as (n, elements of one softmax, softmaxes per n): reductions run over dim 1."""
        if self.softmax_mode == "channel":
            return (self.n, self.c, self.h * self.w)
        return (self.n, self.c * self.h * self.w, 1)

    # -- Signature contract -----------------------------------------------------------------------

    def readable_name(self) -> str:
        return (f"softmax_{self.mode}_{short_name(self.dtype)}_n{self.n}c{self.c}h{self.h}w{self.w}_"
                f"{self.algorithm}_{self.softmax_mode}_alpha{number_symbol(self.alpha)}_"
                f"beta{number_symbol(self.beta)}")

    def input_specs(self) -> list[TensorSpec]:
        names = ["x"] if self.mode == "fwd" else ["y", "dy"]
        if self.beta != 0.0:
            names.append("y_prior" if self.mode == "fwd" else "dx_prior")
        return [TensorSpec(name, self.shape, self.dtype, "NCHW") for name in names]

    def output_specs(self) -> list[TensorSpec]:
        return [TensorSpec("y" if self.mode == "fwd" else "dx", self.shape, self.dtype, "NCHW")]

    def reference(self, *args: torch.Tensor) -> torch.Tensor:
        accumulate = torch.promote_types(args[0].dtype, torch.float32)
        rows = [t.to(accumulate).reshape(self._rows) for t in args]
        if self.mode == "fwd":
            result, prior = _softmax(rows[0], self.algorithm), rows[1:]
        else:
            result, prior = _softmax_backward(rows[0], rows[1], self.algorithm), rows[2:]
        if self.alpha != 1.0:
            result = self.alpha * result
        if prior:
            result = result + self.beta * prior[0]
        return result.reshape(self.shape).to(args[0].dtype)

    @property
    def flops(self) -> int:
        """Per element: fast 3 (exp, sum, divide), accurate and log 5 (max and subtract
        more), backward 4; one more for alpha, two for beta."""
        per_element = 4 if self.mode == "bwd" else (3 if self.algorithm == "fast" else 5)
        per_element += (self.alpha != 1.0) + 2 * (self.beta != 0.0)
        return per_element * math.prod(self.shape)

    @property
    def accumulation_length(self) -> int:
        return self._rows[1]


def _softmax(x: torch.Tensor, algorithm: str) -> torch.Tensor:
    if algorithm != "fast":
        x = x - x.amax(1, keepdim=True)
    if algorithm == "log":
        return x - x.exp().sum(1, keepdim=True).log()
    e = x.exp()
    return e / e.sum(1, keepdim=True)


def _softmax_backward(y: torch.Tensor, dy: torch.Tensor, algorithm: str) -> torch.Tensor:
    if algorithm == "log":
        return dy - y.exp() * dy.sum(1, keepdim=True)
    return y * (dy - (y * dy).sum(1, keepdim=True))

