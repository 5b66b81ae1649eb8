"""The Triton kernels ``boo_hopper_depthwise`` and ``boo_hopper_depthwise_wgrad`` (imported
only where Triton is installed): depthwise convolutions over channels-last images, one
channel per group, every size a compile-time constant (the parameters are the bindings'
pointers alone: IREE's CUDA ABI), float32 sums rounded once.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def boo_hopper_depthwise(src, taps, bias, out, SRC_OFF: tl.constexpr, TAPS_OFF: tl.constexpr, H: tl.constexpr,
                         W: tl.constexpr, C: tl.constexpr, R: tl.constexpr, S: tl.constexpr, SH: tl.constexpr,
                         SW: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr, P: tl.constexpr, Q: tl.constexpr,
                         HAS_BIAS: tl.constexpr, BQ: tl.constexpr, BC: tl.constexpr):
    """``out[n, p, q, c] = sum over taps (r, s) of src[n, p*SH + r - PH, q*SW + s - PW, c] *
    taps[r, s, c]`` (+ ``bias[c]``), src read as zero outside itself: a forward (src x), or a
    stride-1 data gradient (src dY, the taps reversed). The taps are tap-major (a tap's
    channels side by side: one coalesced read per tap). A program computes BQ
    pixels of one output row by BC channels; program (i, j) takes row i // ceil(Q / BQ)."""
    blocks: tl.constexpr = (Q + BQ - 1) // BQ
    row = tl.program_id(0) // blocks
    n, p = row // P, row % P
    qs = (tl.program_id(0) % blocks) * BQ + tl.arange(0, BQ)
    cs = tl.program_id(1) * BC + tl.arange(0, BC)
    q_ok, c_ok = qs < Q, cs < C
    image = src + SRC_OFF + n.to(tl.int64) * (H * W * C)
    acc = tl.zeros([BQ, BC], dtype=tl.float32)
    for r in tl.static_range(R):
        ih = p * SH + r - PH
        row_ok = (ih >= 0) & (ih < H)
        for s in tl.static_range(S):
            iw = qs * SW + s - PW
            ok = (q_ok & (iw >= 0) & (iw < W) & row_ok)[:, None] & c_ok[None, :]
            values = tl.load(image + (ih * W + iw)[:, None] * C + cs[None, :], mask=ok, other=0.0)
            tap = tl.load(taps + TAPS_OFF + (r * S + s) * C + cs, mask=c_ok, other=0.0)
            acc += values.to(tl.float32) * tap.to(tl.float32)[None, :]
    if HAS_BIAS:
        acc += tl.load(bias + cs, mask=c_ok, other=0.0).to(tl.float32)[None, :]
    at = (row.to(tl.int64) * Q + qs)[:, None] * C + cs[None, :]
    tl.store(out + at, acc.to(out.dtype.element_ty), mask=q_ok[:, None] & c_ok[None, :])


@triton.jit
def boo_hopper_depthwise_wgrad(a, b, part, A_OFF: tl.constexpr, B_OFF: tl.constexpr, PART_OFF: tl.constexpr,
                               X_IS_A: tl.constexpr, IMAGES: tl.constexpr, H: tl.constexpr, W: tl.constexpr,
                               C: tl.constexpr, R: tl.constexpr, S: tl.constexpr, SB: tl.constexpr, SH: tl.constexpr,
                               SW: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr, P: tl.constexpr,
                               Q: tl.constexpr, BQ: tl.constexpr, BC: tl.constexpr):
    """Partial sums of a depthwise weight gradient: ``part[g, r, s, c] = sum over the IMAGES
    images of part g and dY's pixels (p, q) of dY[n, p, q, c] * x[n, p*SH + r - PH, q*SW +
    s - PW, c]`` (x zero outside itself), float32. x and dY are bindings ``a`` and ``b`` in
    either order (``X_IS_A``). Program (g, j, r) takes channels j*BC.. and tap row r: each
    of dY's tiles (BQ pixels by BC channels) is read once and multiplied by the S tiles of x
    its taps read, held together as one (SB >= S, BQ, BC) tensor."""
    g, r = tl.program_id(0), tl.program_id(2)
    cs = tl.program_id(1) * BC + tl.arange(0, BC)
    taps = tl.arange(0, SB)
    c_ok, tap_ok = cs < C, taps < S
    x = a + A_OFF if X_IS_A else b + B_OFF
    dy = b + B_OFF if X_IS_A else a + A_OFF
    acc = tl.zeros([SB, BQ, BC], dtype=tl.float32)
    for i in range(IMAGES):
        n = (g * IMAGES + i).to(tl.int64)
        for p in range(P):
            ih = p * SH + r - PH
            row_ok = (ih >= 0) & (ih < H)
            for q0 in range(0, Q, BQ):
                qs = q0 + tl.arange(0, BQ)
                q_ok = qs < Q
                grads = tl.load(dy + ((n * P + p) * Q + qs)[:, None] * C + cs[None, :],
                                mask=q_ok[:, None] & c_ok[None, :], other=0.0).to(tl.float32)
                iw = qs[None, :] * SW + taps[:, None] - PW  # (SB, BQ)
                ok = (tap_ok[:, None] & q_ok[None, :] & (iw >= 0) & (iw < W) & row_ok)[:, :, None] \
                    & c_ok[None, None, :]
                values = tl.load(x + ((n * H + ih) * W + iw)[:, :, None] * C + cs[None, None, :], mask=ok, other=0.0)
                acc += values.to(tl.float32) * grads[None, :, :]
    sums = tl.sum(acc, axis=1)  # (SB, BC)
    at = ((g * R + r) * S + taps)[:, None] * C + cs[None, :]
    tl.store(part + PART_OFF + at, sums, mask=tap_ok[:, None] & c_ok[None, :])
