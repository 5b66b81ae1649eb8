"""MatmulSignature: one (batched) matrix multiply with its epilogue, completely described."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from boo_core import Signature, TensorSpec, UnsupportedError
from boo_core.signatures.dtypes import short_name
from boo_core.signatures.signature import number_symbol, require_finite, require_positive, require_representable

#: Activations a matmul may apply last (the linear-layer epilogue). ``gelu`` is the exact (erf) form.
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu}

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def check_activation(activation: str | None) -> None:
    """Raise :class:`UnsupportedError` unless ``activation`` is None or one of :data:`ACTIVATIONS`."""
    if activation is not None and activation not in ACTIVATIONS:
        raise UnsupportedError(f"activation {activation!r} is not supported; use None, "
                               + ", ".join(ACTIVATIONS))


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype products accumulate in and the epilogue (alpha, beta) runs in: at least float32."""
    return torch.promote_types(dtype, torch.float32)


@dataclass(frozen=True)
class MatmulSignature(Signature):
    """``out = act(alpha * op(A) @ op(B) + beta * C + bias)``, MIOpen gemm semantics.

    Logically A is M×K, B is K×N, C and the result are M×N; ``op(X)`` is X, or X transposed
    where ``trans_a`` / ``trans_b`` say the matrix is *stored* transposed. The tensors are
    passed as stored (contiguous torch tensors):

    ============  ==========================  ==========================
    tensor        row-major (default)         column-major (``col_major``)
    ============  ==========================  ==========================
    A             (M, K); (K, M) if trans_a    (K, M); (M, K) if trans_a
    B             (K, N); (N, K) if trans_b    (N, K); (K, N) if trans_b
    C, result     (M, N)                       (N, M)
    ============  ==========================  ==========================

    A column-major matrix is its transpose stored row-major, which is the torch shape
    given. ``batch > 1`` adds a leading batch dimension to A, B, C and the result (MIOpen's
    packed strided batch); ``bias`` is a vector of N values added to every row of the
    logical M×N result, in every batch. The launchable takes ``(a, b)``, then ``c`` when
    ``beta != 0``, then ``bias`` when ``bias`` is set, and returns the result.

    Products accumulate in float32 (float64 for the float64 reference); the epilogue runs
    at that precision and the result is rounded to ``dtype`` once.
    """

    op_name: ClassVar[str] = "matmul"

    m: int
    n: int
    k: int
    batch: int = 1
    trans_a: bool = False
    trans_b: bool = False
    alpha: float = 1.0
    beta: float = 0.0
    col_major: bool = False
    bias: bool = False
    activation: str | None = None
    dtype: torch.dtype = torch.float32

    def __post_init__(self) -> None:
        require_positive(self, "m", "n", "k", "batch")
        for name in ("trans_a", "trans_b", "col_major", "bias"):
            object.__setattr__(self, name, bool(getattr(self, name)))
        require_finite(self, "alpha", "beta")  # -0.0 becomes 0.0: beta == 0 means no C either way
        require_representable(self, accumulation_dtype(self.dtype), "alpha", "beta")
        check_activation(self.activation)
        if self.dtype not in DTYPES:
            raise UnsupportedError(f"matmul dtype {self.dtype} is not supported; use float32, float16 or bfloat16")

    # -- geometry -------------------------------------------------------------------------------

    def _stored(self, rows: int, cols: int, transposed: bool = False) -> tuple[int, ...]:
        """Torch shape of a logical rows×cols matrix stored transposed and/or column-major."""
        shape = (cols, rows) if transposed != self.col_major else (rows, cols)
        return (self.batch, *shape) if self.batch > 1 else shape

    def _logical(self, stored: torch.Tensor, transposed: bool = False) -> torch.Tensor:
        """The logical matrix of a stored tensor (also maps a logical result to its storage)."""
        return stored.mT if transposed != self.col_major else stored

    @property
    def output_shape(self) -> tuple[int, ...]:
        """Torch shape of the result (and of C)."""
        return self._stored(self.m, self.n)

    # -- Signature contract -----------------------------------------------------------------------

    def readable_name(self) -> str:
        ops = ("t" if self.trans_a else "n") + ("t" if self.trans_b else "n")
        parts = [f"matmul_{short_name(self.dtype)}", f"b{self.batch}m{self.m}n{self.n}k{self.k}", ops,
                 "colmajor" if self.col_major else "rowmajor", f"alpha{number_symbol(self.alpha)}",
                 f"beta{number_symbol(self.beta)}"]
        if self.bias:
            parts.append("bias")
        if self.activation:
            parts.append(self.activation)
        return "_".join(parts)

    def input_specs(self) -> list[TensorSpec]:
        layout = "col-major" if self.col_major else None
        specs = [TensorSpec("a", self._stored(self.m, self.k, self.trans_a), self.dtype, layout),
                 TensorSpec("b", self._stored(self.k, self.n, self.trans_b), self.dtype, layout)]
        if self.beta != 0.0:
            specs.append(TensorSpec("c", self.output_shape, self.dtype, layout))
        if self.bias:
            specs.append(TensorSpec("bias", (self.n,), self.dtype))
        return specs

    def output_specs(self) -> list[TensorSpec]:
        return [TensorSpec("out", self.output_shape, self.dtype, "col-major" if self.col_major else None)]

    def reference(self, a: torch.Tensor, b: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
        accumulate = accumulation_dtype(a.dtype)
        y = torch.matmul(self._logical(a, self.trans_a).to(accumulate), self._logical(b, self.trans_b).to(accumulate))
        return self.epilogue(y, rest, accumulate).to(a.dtype)

    def eager(self, a: torch.Tensor, b: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
        """torch.matmul in the signature's dtype (cuBLAS on CUDA), then the epilogue."""
        y = torch.matmul(self._logical(a, self.trans_a), self._logical(b, self.trans_b))
        return self.epilogue(y, rest, a.dtype)

    def epilogue(self, y: torch.Tensor, rest: tuple[torch.Tensor, ...], dtype: torch.dtype) -> torch.Tensor:
        """alpha, beta * C, bias and the activation applied, in ``dtype``, to the logical
        product ``y``; the result in the stored layout. ``rest`` is the inputs after A and B."""
        extra = iter(rest)
        if self.alpha != 1.0:
            y = y * self.alpha
        if self.beta != 0.0:
            y = y + self.beta * self._logical(next(extra)).to(dtype)
        if self.bias:
            y = y + next(extra).to(dtype)
        if self.activation:
            y = ACTIVATIONS[self.activation](y)
        return self._logical(y)

    @property
    def flops(self) -> int:
        """2·M·N·K per batch, plus one per result element for each epilogue step (alpha,
        bias, activation) and two for beta·C."""
        epilogue = (self.alpha != 1.0) + 2 * (self.beta != 0.0) + self.bias + (self.activation is not None)
        return self.batch * self.m * self.n * (2 * self.k + epilogue)

    @property
    def accumulation_length(self) -> int:
        return self.k

