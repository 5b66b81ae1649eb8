"""The Triton kernels ``boo_hopper_bn_sums`` and ``boo_hopper_bn_dx`` (imported only where
Triton is installed): a batch-norm backward over ``ROWS`` rows of ``COLUMNS`` channels
(channels last, or a per-activation norm's activations), every size a compile-time constant,
so that the parameters are the bindings' pointers alone (IREE's CUDA ABI). ``*_AT``: each
tensor's element offset in its binding.

The gradient of the normalized value is ``g = dy`` or, after a ReLU (``RELU``), ``dy`` where
the forward's output ``y`` is positive, 0 elsewhere; with a residual added before the ReLU
(``RESIDUAL``), ``dy + dy2`` rounded to the tensors' type first, as the op's module computes
it. Pointers the problem does not have are None.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _output_gradient(y, dy, dy2, Y_AT: tl.constexpr, DY_AT: tl.constexpr, DY2_AT: tl.constexpr, at, mask,
                     RELU: tl.constexpr, RESIDUAL: tl.constexpr, POSITIVE_TEST: tl.constexpr):
    """g at ``at`` in the tensors' type: ``POSITIVE_TEST`` keeps dy where ``y > 0`` (a NaN y
    gives 0), else zeroes it where ``y <= 0`` (a NaN y keeps dy): the two spellings of the
    op's first stage and elementwise pass."""
    grad = tl.load(dy + DY_AT + at, mask=mask, other=0.0)
    if RESIDUAL:
        grad = (grad.to(tl.float32) + tl.load(dy2 + DY2_AT + at, mask=mask, other=0.0).to(tl.float32)).to(grad.dtype)
    if RELU:
        out = tl.load(y + Y_AT + at, mask=mask, other=0.0)
        if POSITIVE_TEST:
            grad = tl.where(out > 0, grad, 0.0).to(grad.dtype)
        else:
            grad = tl.where(out <= 0, 0.0, grad).to(grad.dtype)
    return grad


@triton.jit
def boo_hopper_bn_sums(y, dy, dy2, x, mean, invstd, partials, Y_AT: tl.constexpr, DY_AT: tl.constexpr,
                       DY2_AT: tl.constexpr, X_AT: tl.constexpr, MEAN_AT: tl.constexpr, INVSTD_AT: tl.constexpr,
                       PARTIALS_AT: tl.constexpr, PARTS: tl.constexpr, GROUP: tl.constexpr, COLUMNS: tl.constexpr,
                       PARTS_PER: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, RELU: tl.constexpr,
                       RESIDUAL: tl.constexpr):
    """Both sums of a backward's first stage: ``partials`` is ``(PARTS, 2, COLUMNS)``, where
    the sums of all parts are ``sum(g)`` and ``sum(g (x - mean) invstd)``. A program takes
    ``PARTS_PER`` parts of ``GROUP`` rows in float32 registers and writes their total as its
    first part, zeros as the others: the stages after it only add the parts up."""
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    col_ok = cols < COLUMNS
    centre = tl.load(mean + MEAN_AT + cols, mask=col_ok, other=0.0)
    scale = tl.load(invstd + INVSTD_AT + cols, mask=col_ok, other=0.0)
    first = tl.program_id(0) * PARTS_PER
    start = first * GROUP
    end = tl.minimum(start + PARTS_PER * GROUP, PARTS * GROUP)
    sum_g = tl.zeros([BLOCK_R, BLOCK_C], tl.float32)
    sum_g_xhat = tl.zeros([BLOCK_R, BLOCK_C], tl.float32)
    for step in tl.range(0, PARTS_PER * GROUP, BLOCK_R):
        rows = start + step + tl.arange(0, BLOCK_R)
        mask = (rows < end)[:, None] & col_ok[None, :]
        at = rows.to(tl.int64)[:, None] * COLUMNS + cols[None, :]
        grad = _output_gradient(y, dy, dy2, Y_AT, DY_AT, DY2_AT, at, mask, RELU, RESIDUAL, True).to(tl.float32)
        value = tl.load(x + X_AT + at, mask=mask, other=0.0).to(tl.float32)
        sum_g += grad
        sum_g_xhat += grad * ((value - centre[None, :]) * scale[None, :])
    out = partials + PARTIALS_AT + first.to(tl.int64) * 2 * COLUMNS + cols
    tl.store(out, tl.sum(sum_g, 0), mask=col_ok)
    tl.store(out + COLUMNS, tl.sum(sum_g_xhat, 0), mask=col_ok)
    zero = tl.zeros([BLOCK_C], tl.float32)
    for part in tl.static_range(1, PARTS_PER):
        ok = col_ok & (first + part < PARTS)
        tl.store(out + part * 2 * COLUMNS, zero, mask=ok)
        tl.store(out + part * 2 * COLUMNS + COLUMNS, zero, mask=ok)


@triton.jit
def boo_hopper_bn_dx(w, invstd, y, dy, dy2, sums, x, mean, dres, dx, W_AT: tl.constexpr, INVSTD_AT: tl.constexpr,
                     Y_AT: tl.constexpr, DY_AT: tl.constexpr, DY2_AT: tl.constexpr, SUM_G_AT: tl.constexpr,
                     X_AT: tl.constexpr, MEAN_AT: tl.constexpr, SUM_G_XHAT_AT: tl.constexpr, DRES_AT: tl.constexpr,
                     DX_AT: tl.constexpr, ROWS: tl.constexpr, COLUMNS: tl.constexpr, BLOCK_R: tl.constexpr,
                     BLOCK_C: tl.constexpr, RELU: tl.constexpr, RESIDUAL: tl.constexpr):
    """``dx = w invstd / n (n g - sum(g) - (x - mean) invstd sum(g x̂))`` with ``n = ROWS``,
    in float32, rounded once, and with a residual its gradient ``g`` as ``dres``; the
    per-channel factors are taken once a program. Both sums are in the binding ``sums``."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    col_ok = cols < COLUMNS
    mask = (rows < ROWS)[:, None] & col_ok[None, :]
    at = rows.to(tl.int64)[:, None] * COLUMNS + cols[None, :]
    scale = tl.load(invstd + INVSTD_AT + cols, mask=col_ok, other=0.0)
    factor = tl.load(w + W_AT + cols, mask=col_ok, other=0.0).to(tl.float32) * scale / ROWS
    shift = tl.load(sums + SUM_G_AT + cols, mask=col_ok, other=0.0)
    slope = tl.load(sums + SUM_G_XHAT_AT + cols, mask=col_ok, other=0.0) * scale
    centre = tl.load(mean + MEAN_AT + cols, mask=col_ok, other=0.0)
    grad = _output_gradient(y, dy, dy2, Y_AT, DY_AT, DY2_AT, at, mask, RELU, RESIDUAL, False)
    if RESIDUAL:
        tl.store(dres + DRES_AT + at, grad, mask=mask)
    value = tl.load(x + X_AT + at, mask=mask, other=0.0).to(tl.float32)
    out = factor[None, :] * (grad.to(tl.float32) * ROWS - shift[None, :] - (value - centre[None, :]) * slope[None, :])
    tl.store(dx + DX_AT + at, out.to(dx.dtype.element_ty), mask=mask)
