"""LayerNormSignature: one layer-normalization kernel (forward or backward), completely described."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch

from boo_core import Signature, TensorSpec, UnsupportedError
from boo_core.signatures.dtypes import short_name
from boo_core.signatures.signature import require_representable

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
#: The gradients a backward kernel can return, in output order.
GRADIENTS = ("dx", "dw", "db")


def stats_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of mean and rstd (and of every accumulation): at least float32."""
    return torch.promote_types(dtype, torch.float32)


@dataclass(frozen=True)
class LayerNormSignature(Signature):
    """Layer normalization of ``input_shape`` over its dims from ``normalized_dim`` on.

    As MIOpen defines it: the normalized shape is ``input_shape[normalized_dim:]``; mean and
    rstd (``1 / sqrt(biased variance + eps)``) have shape ``input_shape[:normalized_dim]``
    and dtype float32 (float64 for float64 inputs); ``weight`` and ``bias`` (each optional)
    have the normalized shape and the input's dtype.

    ``mode="fwd"``: the kernel takes ``(x[, weight][, bias])`` and returns ``(y, mean, rstd)``.
    ``mode="bwd"``: it takes ``(dy, x, mean, rstd[, weight])`` and returns the gradients
    named in ``gradients`` (a subset of dx, dw, db, in that order; default: every one the
    affine parameters allow).
    """

    op_name: ClassVar[str] = "layernorm"

    input_shape: tuple[int, ...]
    normalized_dim: int
    weight: bool = False
    bias: bool = False
    eps: float = 1e-5
    dtype: torch.dtype = torch.float32
    mode: str = "fwd"
    gradients: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731 (frozen)
        set_("input_shape", tuple(int(d) for d in self.input_shape))
        set_("normalized_dim", int(self.normalized_dim))
        set_("eps", float(self.eps))
        rank = len(self.input_shape)
        if rank < 1 or min(self.input_shape) < 1:
            raise ValueError(f"input_shape {self.input_shape} must have at least one dim, all sizes positive")
        if not 0 <= self.normalized_dim < rank:
            raise ValueError(f"normalized_dim {self.normalized_dim} is out of range for a {rank}-D input "
                             f"(0 <= normalized_dim < {rank})")
        if not (math.isfinite(self.eps) and self.eps >= 0):
            raise ValueError(f"eps {self.eps} must be finite and not negative")
        if self.dtype not in FLOAT_DTYPES:
            raise UnsupportedError(f"layernorm dtype {self.dtype} is not supported; use float32, float16 or bfloat16")
        require_representable(self, stats_dtype(self.dtype), "eps")  # added to the variance, in the stats dtype
        if self.mode not in ("fwd", "bwd"):
            raise ValueError(f"mode {self.mode!r} must be 'fwd' or 'bwd'")
        set_("gradients", self._checked_gradients())

    def _checked_gradients(self) -> tuple[str, ...]:
        available = ("dx",) + (("dw",) if self.weight else ()) + (("db",) if self.bias else ())
        if self.mode == "fwd":
            if self.gradients:
                raise ValueError(f"a forward signature returns no gradients (got {self.gradients})")
            return ()
        if self.gradients is None:
            return available
        wanted = set(self.gradients)
        if not wanted or wanted - set(GRADIENTS):
            raise ValueError(f"gradients {self.gradients} must be a non-empty subset of {GRADIENTS}")
        missing = wanted - set(available)
        if missing:
            raise ValueError(f"gradient(s) {', '.join(sorted(missing))} need a "
                             f"{' and a '.join(('weight' if g == 'dw' else 'bias') for g in sorted(missing))}")
        return tuple(g for g in GRADIENTS if g in wanted)

    # -- geometry -------------------------------------------------------------------------------

    @property
    def normalized_shape(self) -> tuple[int, ...]:
        return self.input_shape[self.normalized_dim:]

    @property
    def stats_shape(self) -> tuple[int, ...]:
        """Shape of mean and rstd: the dims that are not normalized."""
        return self.input_shape[: self.normalized_dim]

    @property
    def stats_dtype(self) -> torch.dtype:
        return stats_dtype(self.dtype)

    @property
    def rows(self) -> int:
        """How many independent normalizations one call computes."""
        return math.prod(self.stats_shape)

    @property
    def row_length(self) -> int:
        """Elements in one normalization."""
        return math.prod(self.normalized_shape)

    # -- Signature contract -----------------------------------------------------------------------

    def readable_name(self) -> str:
        affine = ("w" if self.weight else "") + ("b" if self.bias else "")
        parts = [
            f"layernorm_{self.mode}_{short_name(self.dtype)}",
            "x".join(map(str, self.input_shape)),
            f"o{self.normalized_dim}",
            f"affine_{affine or 'none'}",
            "eps" + repr(self.eps).replace("-", "m").replace("+", "p").replace(".", "p"),
        ]
        if self.mode == "bwd":
            parts.append("".join(self.gradients))
        return "_".join(parts)

    def input_specs(self) -> list[TensorSpec]:
        x = TensorSpec("x", self.input_shape, self.dtype)
        params = [TensorSpec(name, self.normalized_shape, self.dtype)
                  for name, present in (("weight", self.weight), ("bias", self.bias)) if present]
        if self.mode == "fwd":
            return [x, *params]
        stats = [TensorSpec(name, self.stats_shape, self.stats_dtype) for name in ("mean", "rstd")]
        weight = params[:1] if self.weight else []
        return [TensorSpec("dy", self.input_shape, self.dtype), x, *stats, *weight]

    def output_specs(self) -> list[TensorSpec]:
        if self.mode == "fwd":
            return [TensorSpec("y", self.input_shape, self.dtype),
                    TensorSpec("mean", self.stats_shape, self.stats_dtype),
                    TensorSpec("rstd", self.stats_shape, self.stats_dtype)]
        shapes = {"dx": self.input_shape, "dw": self.normalized_shape, "db": self.normalized_shape}
        return [TensorSpec(g, shapes[g], self.dtype) for g in self.gradients]

    def reference(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self.mode == "fwd":
            return self._forward(*args)
        return self._backward(*args)

    def _forward(self, x: torch.Tensor, *params: torch.Tensor, scaled_sums: bool = True) -> tuple[torch.Tensor, ...]:
        # The numerics reference, and the kernel's source where the plugin writes no MLIR (GPU
        # targets). On x as (rows, row_length), accumulated in at least float32, in two passes
        # (mean, then the mean of squared deviations): unlike E[x^2] - E[x]^2 they do not
        # cancel when the mean is large against the spread.
        # The mean is the sum of x / n, which cannot overflow for finite x, the variance the sum
        # of squared deviations / n; one that is not finite gives NaN (never a finite y from
        # rstd = 0): docs/numerics.md.
        # ``scaled_sums=False`` divides after summing (``mean()``): IREE 3.13's CUDA backend
        # fails to compile a reduction of scaled values ("failed to distribute"), so GPU
        # kernels are built that way (the ``mean_statistics`` formulation); its sums overflow
        # only for |x| near float32's limit, where the statistics become inf.
        acc = stats_dtype(x.dtype)
        xf = x.to(acc).reshape(self.rows, self.row_length)
        if scaled_sums:
            mean = (xf * (1.0 / self.row_length)).sum(1, keepdim=True)
        else:
            mean = xf.mean(1, keepdim=True)
        centered = xf - mean
        if scaled_sums:
            var = (centered * centered * (1.0 / self.row_length)).sum(1, keepdim=True)
            rstd = torch.where(var < float("inf"), torch.rsqrt(var + self.eps), float("nan"))
        else:
            var = (centered * centered).mean(1, keepdim=True)
            rstd = torch.rsqrt(var + self.eps) + (var - var)  # NaN where var is not finite (inf - inf)
        y = centered * rstd
        weight, bias = self._split_params(params)
        if weight is not None:
            y = y * weight.to(acc).reshape(1, self.row_length)
        if bias is not None:
            y = y + bias.to(acc).reshape(1, self.row_length)
        stats = self.stats_shape
        return y.to(x.dtype).reshape(self.input_shape), mean.reshape(stats), rstd.reshape(stats)

    def _backward(self, dy: torch.Tensor, x: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor,
                  weight: torch.Tensor | None = None, *, column_chunk: int | None = None) -> tuple[torch.Tensor, ...]:
        """The gradients; ``column_chunk`` sums dw and db over the rows in stages of that
        many rows (:func:`_column_sums`): the same sums, in an order a GPU can spread over
        more threads than one per column."""
        acc = stats_dtype(x.dtype)
        rows, n = self.rows, self.row_length
        rstd = rstd.to(acc).reshape(rows, 1)
        mean = mean.to(acc).reshape(rows, 1)
        x2, dy2 = x.reshape(rows, n), dy.reshape(rows, n)
        results = []
        if "dx" in self.gradients:
            xhat = (x2.to(acc) - mean) * rstd
            dyf = dy2.to(acc)
            g = dyf * weight.to(acc).reshape(1, n) if weight is not None else dyf
            dx = rstd * (g - g.mean(1, keepdim=True) - xhat * (g * xhat).mean(1, keepdim=True))
            results.append(dx.reshape(self.input_shape))
        if "dw" in self.gradients:
            dw = _column_sums(lambda d, a, m, r: d.to(acc) * ((a.to(acc) - m) * r), (dy2, x2, mean, rstd), column_chunk)
            results.append(dw.reshape(self.normalized_shape))
        if "db" in self.gradients:
            results.append(_column_sums(lambda d: d.to(acc), (dy2,), column_chunk).reshape(self.normalized_shape))
        return tuple(r.to(x.dtype) for r in results)

    def eager(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """PyTorch's own layer-norm kernels (aten.native_layer_norm and its backward) in the
        signature's dtype: the benchmarks' baseline."""
        stats = (*self.stats_shape, *(1,) * len(self.normalized_shape))
        if self.mode == "fwd":
            x, *params = args
            weight, bias = self._split_params(params)
            y, mean, rstd = torch.ops.aten.native_layer_norm(x, list(self.normalized_shape), weight, bias, self.eps)
            return y, mean.reshape(self.stats_shape), rstd.reshape(self.stats_shape)
        dy, x, mean, rstd, *weight = args
        stats_dtype_ = x.dtype if x.device.type == "cpu" else mean.dtype  # what each of torch's kernels wants
        mask = [name in self.gradients for name in ("dx", "dw", "db")]
        bias = torch.empty(self.normalized_shape, dtype=x.dtype, device=x.device) if self.bias else None
        grads = torch.ops.aten.native_layer_norm_backward(
            dy, x, list(self.normalized_shape), mean.reshape(stats).to(stats_dtype_),
            rstd.reshape(stats).to(stats_dtype_), weight[0] if weight else None, bias, mask)
        return tuple(g for g, wanted in zip(grads, mask) if wanted)

    def _split_params(self, params: Sequence[torch.Tensor]) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        params = list(params)
        weight = params.pop(0) if self.weight else None
        bias = params.pop(0) if self.bias else None
        return weight, bias

    def get_sample_args(self, *, device: str | torch.device = "cpu", seed: int | None = None,
                        splat_value: float | None = None) -> tuple[torch.Tensor, ...]:
        """Random inputs; for backward, mean and rstd are x's true statistics."""
        args = super().get_sample_args(device=device, seed=seed, splat_value=splat_value)
        if self.mode == "fwd" or splat_value is not None:
            return args
        dy, x, _, _, *weight = args
        forward = LayerNormSignature(self.input_shape, self.normalized_dim, eps=self.eps, dtype=self.dtype)
        with torch.no_grad():
            _, mean, rstd = forward.reference(x.to(torch.float64))
        return (dy, x, mean.to(self.stats_dtype), rstd.to(self.stats_dtype), *weight)

    @property
    def flops(self) -> int:
        """Per element: forward 5 (sum, subtract, square, sum, scale) plus one per affine
        parameter; backward 9 for dx (one more with a weight), 2 for dw, 1 for db."""
        if self.mode == "fwd":
            per_element = 5 + self.weight + self.bias
        else:
            costs = {"dx": 9 + self.weight, "dw": 2, "db": 1}
            per_element = sum(costs[g] for g in self.gradients)
        return per_element * math.prod(self.input_shape)

    def error_scales(self, args: Sequence[torch.Tensor]) -> Mapping[str, float]:
        """The forward mean's error scales with the mean of |x| (a row of both signs can
        average to nearly 0), not with the mean itself."""
        if self.mode != "fwd" or not args or not args[0].numel():
            return {}
        x = args[0].detach().to(torch.float64).reshape(self.rows, self.row_length)
        return {"mean": x.abs().mean(1).max().item()}

    @property
    def accumulation_length(self) -> int:
        """Terms summed into one value: a row for mean/rstd/dx, a column for dw/db."""
        if self.mode == "bwd" and set(self.gradients) & {"dw", "db"}:
            return max(self.rows, self.row_length if "dx" in self.gradients else 1)
        return self.row_length


def _column_sums(term: Callable[..., torch.Tensor], tensors: Sequence[torch.Tensor], chunk: int | None) -> torch.Tensor:
    """Sums over the rows of ``term(*tensors)``, elementwise over (rows, n) tensors and
    (rows, 1) or (1, n) ones broadcast: at once, or (``chunk``) in stages, each summing groups
    of ``chunk`` consecutive rows (zero rows added to fill the last group) until at most
    ``chunk`` rows are left, then those. The first stage applies ``term`` to views of the
    tensors already grouped (as many rows per group as divide evenly, at most ``chunk``), so
    that a compiler fuses it into that reduction instead of writing its float32 values out."""
    if chunk is None:
        return term(*tensors).sum(0)
    rows = max(t.shape[0] for t in tensors)
    first = math.gcd(rows, chunk)
    values = term(*(t.reshape(rows // first, first, t.shape[1]) if t.shape[0] == rows else
                    t.reshape(1, 1, t.shape[1]) for t in tensors)).sum(1)
    while values.shape[0] > chunk:
        n_rows, n = values.shape
        groups = -(-n_rows // chunk)
        padded = torch.nn.functional.pad(values, (0, 0, 0, groups * chunk - n_rows))
        values = padded.reshape(groups, chunk, n).sum(1)
    return values.sum(0)
