"""The Triton kernels ``boo_hopper_layernorm`` and ``boo_hopper_layernorm_dx`` (imported only
where Triton is installed).

Layer normalization of ``ROWS`` contiguous rows of ``N`` elements, ``ROWS_PER`` rows a
program: each row is read once into registers, its mean and the mean of its squared
deviations taken from them in float32 (the two passes of the ``mean_statistics``
formulation, over registers instead of memory), then ``y = (x - mean) * rstd [* w] [+ b]``
rounded once to y's type; ``mean`` and ``rstd = 1 / sqrt(var + EPS)`` are written in
float32. A NaN or infinite variance makes rstd NaN, as IREE's kernel does. Every size is a
compile-time constant, so the parameters are the bindings' pointers alone (IREE's CUDA ABI).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _program_rows(ROWS: tl.constexpr, N: tl.constexpr, BLOCK: tl.constexpr, ROWS_PER: tl.constexpr):
    """This program's rows and the columns of a block: their indices, which are in bounds,
    the mask of both, and each element's offset."""
    rows = tl.program_id(0) * ROWS_PER + tl.arange(0, ROWS_PER)
    cols = tl.arange(0, BLOCK)
    row_ok = rows < ROWS
    col_ok = cols < N
    return rows, cols, row_ok, col_ok, row_ok[:, None] & col_ok[None, :], rows.to(tl.int64)[:, None] * N + cols[None, :]


@triton.jit
def boo_hopper_layernorm(x, w, b, mean, rstd, y, ROWS: tl.constexpr, N: tl.constexpr, EPS: tl.constexpr,
                         BLOCK: tl.constexpr, ROWS_PER: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr):
    rows, cols, row_ok, col_ok, mask, at = _program_rows(ROWS, N, BLOCK, ROWS_PER)
    values = tl.load(x + at, mask=mask, other=0.0).to(tl.float32)
    row_mean = tl.sum(values, axis=1) / N
    centred = tl.where(mask, values - row_mean[:, None], 0.0)
    var = tl.sum(centred * centred, axis=1) / N
    row_rstd = 1.0 / tl.sqrt_rn(var + EPS) + (var - var)
    out = centred * row_rstd[:, None]
    if HAS_W:
        out = out * tl.load(w + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    if HAS_B:
        out = out + tl.load(b + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    tl.store(y + at, out.to(y.dtype.element_ty), mask=mask)
    tl.store(mean + rows, row_mean, mask=row_ok)
    tl.store(rstd + rows, row_rstd, mask=row_ok)


@triton.jit
def boo_hopper_layernorm_dx(w, x, mean, rstd, dy, unused, dx, ROWS: tl.constexpr, N: tl.constexpr,
                            BLOCK: tl.constexpr, ROWS_PER: tl.constexpr):
    """dx of a layer norm with a weight, ``ROWS_PER`` rows a program, each row's x and dy
    read once: ``dx = rstd * (w dy - mean(w dy) - x̂ mean(w dy x̂))`` with ``x̂ = (x - mean) *
    rstd``, in float32, rounded once. ``unused`` is the binding where IREE's module keeps
    a row sum it computed in an executable of its own; this kernel sums both itself."""
    rows, cols, row_ok, col_ok, mask, at = _program_rows(ROWS, N, BLOCK, ROWS_PER)
    row_mean = tl.load(mean + rows, mask=row_ok, other=0.0)
    row_rstd = tl.load(rstd + rows, mask=row_ok, other=0.0)
    x_hat = (tl.load(x + at, mask=mask, other=0.0).to(tl.float32) - row_mean[:, None]) * row_rstd[:, None]
    weight = tl.load(w + cols, mask=col_ok, other=0.0).to(tl.float32)
    w_dy = tl.load(dy + at, mask=mask, other=0.0).to(tl.float32) * weight[None, :]
    mean_w_dy = tl.sum(w_dy, axis=1) / N
    mean_w_dy_x_hat = tl.sum(w_dy * x_hat, axis=1) / N
    out = row_rstd[:, None] * (w_dy - mean_w_dy[:, None] - x_hat * mean_w_dy_x_hat[:, None])
    tl.store(dx + at, out.to(dx.dtype.element_ty), mask=mask)
