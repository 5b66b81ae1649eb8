"""The Triton convolution kernels (imported only where Triton is installed).

Every size a compile-time constant, every tensor a pointer plus a constant
element offset (IREE's ABI passes one pointer per binding; a binding may hold several
tensors at fixed offsets):

* ``boo_hopper_conv``: an implicit-GEMM convolution over a channels-last input of HP x WP
  pixels that already holds its padding (or needs none), or, with ``PAD_H``/``PAD_W`` (CIN a
  multiple of BK), that many pixels of zeros read around it by masked loads: ``y[m, co] =
  sum_{r, s, ci} x[n, p*SH + r - PAD_H, q*SW + s - PAD_W, ci] * W(co, r, s, ci)`` for output
  pixel ``m = (n, p, q)``; M = N*P*Q pixels by COUT channels, reduced over R*S*CIN. ``W`` is
  the filter as stored: ``(COUT, R, S, CIN)`` (a forward filter), or ``(CIN, R, S, COUT)``
  read with its taps flipped when ``IN_MAJOR`` and ``FLIP`` (a forward filter seen by the
  data gradient, which is the forward convolution of dY, zero-inserted and padded, with the
  flipped, transposed filter). Float32 accumulation, one rounding to bf16. Where CIN is a
  multiple of BK each step of BK reads one tap's contiguous channels (16-byte loads,
  pipelined ``num_stages`` deep; ``tl.dot`` is wgmma on sm_90a); otherwise (the 3-channel
  stem) the reduction index is unfolded into (r, s, ci) per element, masked past R*S*CIN.
  Rows past M repeat the last pixel and are not stored. Output tiles are visited in groups
  of GROUP rows of tiles for L2 reuse. With ``SCATTER`` (a strided 1x1 data gradient) the
  input is dY itself, compact, and output pixel (n, p, q) is stored at (n, p*DH, q*DW) of an
  (N, OH, OW, COUT) output whose other pixels of each DH x DW block are written as zeros: no
  multiply-add of an inserted zero. A forward convolution's epilogue: ``HAS_BIAS`` adds
  ``bias[co]``, ``HAS_NORM`` rounds to bf16 and applies a batch norm (``(y - mean[co]) *
  scale[co] / sqrt(var[co] + EPS) + shift[co]``), ``HAS_RES`` adds ``res[m, co]`` (a skip
  connection, stored like y), then ``ACT`` is applied, in float32 before the output's
  rounding. With ``SPLITS`` > 1 (CIN a multiple of BK) program ``pid`` runs split ``pid //
  tiles`` of its tile's reduction steps and stores its float32 sums, no epilogue, at
  ``y[split, m, co]`` (``(SPLITS, M, COUT)``): the conv op's ``split_k`` module, whose next
  executable adds them.
* ``boo_hopper_pad``: ``dst[n, i, j, c] = src[n, (i - LO_H) / DH, (j - LO_W) / DW, c]`` where
  that is a source element (the offset divisible by the dilation, inside the source), else
  0: zero padding (DH = DW = 1) or zero insertion and padding (a strided data gradient's dY),
  channels-last in and out, over a whole ``(N, HP, WP, C)`` destination. Also a plain copy.

The strided data gradient's (dgrad.py): ``boo_hopper_dgrad_phases``, one phase of dX's
pixels per program, each with the taps it reads only.

The weight gradient's (wgrad.py): ``boo_hopper_wgrad`` (split-K partial products over the
pixels, a 1x1 window's or, as an implicit GEMM, a padded image's or x's own, padded as it is
read), ``boo_hopper_sum`` (the partial sums added), ``boo_hopper_subsample`` (a strided 1x1 window's pixels) and
``boo_hopper_copy`` (a flat copy, or a chunk of one).
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._triton_shared import activation, grouped_tile


@triton.jit
def boo_hopper_conv(x, w, bias, mean, var, scale, shift, res, y, X_OFF: tl.constexpr, W_OFF: tl.constexpr,
                    W_FROM_X: tl.constexpr, N: tl.constexpr, HP: tl.constexpr, WP: tl.constexpr,
                    CIN: tl.constexpr, COUT: tl.constexpr, R: tl.constexpr, S: tl.constexpr,
                    SH: tl.constexpr, SW: tl.constexpr, P: tl.constexpr,
                    Q: tl.constexpr, IN_MAJOR: tl.constexpr, FLIP: tl.constexpr, BM: tl.constexpr,
                    BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr, HAS_BIAS: tl.constexpr,
                    ACT: tl.constexpr, HAS_NORM: tl.constexpr, EPS: tl.constexpr, HAS_RES: tl.constexpr,
                    SCATTER: tl.constexpr,
                    OH: tl.constexpr, OW: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr,
                    PAD_H: tl.constexpr, PAD_W: tl.constexpr, SPLITS: tl.constexpr):
    M: tl.constexpr = N * P * Q
    tiles_m: tl.constexpr = (M + BM - 1) // BM
    tiles_n: tl.constexpr = COUT // BN
    pid = tl.program_id(0)
    if SPLITS > 1:
        split = pid // (tiles_m * tiles_n)
        pid = pid % (tiles_m * tiles_n)
    else:
        split = 0
    pid_m, pid_n = grouped_tile(pid, tiles_m, tiles_n, GROUP)

    offs_m = pid_m * BM + tl.arange(0, BM)
    pixel = tl.minimum(offs_m, M - 1)
    n = pixel // (P * Q)
    p = (pixel // Q) % P
    q = pixel % Q
    PADS: tl.constexpr = PAD_H > 0 or PAD_W > 0  # the image is unpadded: taps outside it read zeros
    top = p * SH - PAD_H
    left = q * SW - PAD_W
    x_rows = x + X_OFF + ((n * HP + top) * WP + left) * CIN  # (BM,) pointers to each window's corner
    offs_n = pid_n * BN + tl.arange(0, BN)
    if W_FROM_X:
        w_base = x + W_OFF
    else:
        w_base = w + W_OFF
    offs_k = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    if CIN % BK == 0:
        blocks: tl.constexpr = CIN // BK
        if SPLITS > 1:
            STEPS: tl.constexpr = (R * S * blocks + SPLITS - 1) // SPLITS  # a split's steps (the last may have fewer)
            first = split * STEPS
            stop = tl.minimum(first + STEPS, R * S * blocks)
        else:  # constant bounds: Triton pipelines the loop with no guard on its trip count
            first = 0
            stop = R * S * blocks
        for t in range(first, stop):
            tap = t // blocks
            c0 = (t % blocks) * BK
            r = tap // S
            s = tap % S
            if PADS:
                inside = (top + r >= 0) & (top + r < HP) & (left + s >= 0) & (left + s < WP)
                a = tl.load(x_rows[:, None] + ((r * WP + s) * CIN + c0) + offs_k[None, :], mask=inside[:, None],
                            other=0.0)
            else:
                a = tl.load(x_rows[:, None] + ((r * WP + s) * CIN + c0) + offs_k[None, :])
            if IN_MAJOR:
                wtap = tap
                if FLIP:
                    wtap = R * S - 1 - tap
                b = tl.load(w_base + ((c0 + offs_k[:, None]) * (R * S) + wtap) * COUT + offs_n[None, :])
            else:
                b = tl.load(w_base + offs_n[None, :] * (R * S * CIN) + tap * CIN + c0 + offs_k[:, None])
            acc = tl.dot(a, b, acc)
    else:
        KRED: tl.constexpr = R * S * CIN
        for k0 in range(0, KRED, BK):
            kk = k0 + offs_k
            valid = kk < KRED
            tap = kk // CIN
            ci = kk % CIN
            r = tap // S
            s = tap % S
            a = tl.load(x_rows[:, None] + ((r * WP + s) * CIN + ci)[None, :], mask=valid[None, :], other=0.0)
            if IN_MAJOR:
                wtap = tap
                if FLIP:
                    wtap = R * S - 1 - tap
                b = tl.load(w_base + (ci[:, None] * (R * S) + wtap[:, None]) * COUT + offs_n[None, :],
                            mask=valid[:, None], other=0.0)
            else:
                b = tl.load(w_base + offs_n[None, :] * KRED + kk[:, None], mask=valid[:, None], other=0.0)
            acc = tl.dot(a, b, acc)
    m_ok = offs_m < M
    if SPLITS > 1:  # float32 partial sums (SPLITS, M, COUT): the sum and the epilogue are another kernel's
        tl.store(y + split * (M * COUT) + offs_m[:, None] * COUT + offs_n[None, :], acc, mask=m_ok[:, None])
    else:
        if HAS_BIAS:
            acc += tl.load(bias + offs_n).to(tl.float32)[None, :]
        if HAS_NORM:  # CBAInfer: the conv's result rounded as the op computes it, then the batch norm in float32
            acc = acc.to(tl.bfloat16).to(tl.float32)
            inv = tl.load(scale + offs_n).to(tl.float32) / tl.sqrt(tl.load(var + offs_n).to(tl.float32) + EPS)
            acc = (acc - tl.load(mean + offs_n).to(tl.float32)[None, :]) * inv[None, :] \
                + tl.load(shift + offs_n).to(tl.float32)[None, :]
        if HAS_RES:  # CBAInfer's skip connection, stored as y is
            residual = tl.load(res + offs_m[:, None] * COUT + offs_n[None, :], mask=m_ok[:, None], other=0.0)
            acc += residual.to(tl.float32)
        acc = activation(acc, ACT)
        if SCATTER:  # pixel (n, p, q) lands at (n, p*DH, q*DW) of an OH x OW output; the rest of its block is 0
            corner = ((n * OH + p * DH) * OW + q * DW) * COUT
            tl.store(y + corner[:, None] + offs_n[None, :], acc.to(tl.bfloat16), mask=m_ok[:, None])
            zeros = tl.zeros((BM, BN), dtype=tl.bfloat16)
            for a in tl.static_range(DH):
                for b in tl.static_range(DW):
                    if a + b > 0:
                        ok = m_ok & (p * DH + a < OH) & (q * DW + b < OW)
                        tl.store(y + (corner + (a * OW + b) * COUT)[:, None] + offs_n[None, :], zeros,
                                 mask=ok[:, None])
        else:
            tl.store(y + offs_m[:, None] * COUT + offs_n[None, :], acc.to(tl.bfloat16), mask=m_ok[:, None])


@triton.jit
def boo_hopper_pad(src, dst, DST_OFF: tl.constexpr, N: tl.constexpr, H: tl.constexpr, W: tl.constexpr,
                   C: tl.constexpr, HP: tl.constexpr, WP: tl.constexpr, LO_H: tl.constexpr, LO_W: tl.constexpr,
                   DH: tl.constexpr, DW: tl.constexpr, BP: tl.constexpr, BC: tl.constexpr):
    blocks_c: tl.constexpr = (C + BC - 1) // BC
    pid = tl.program_id(0)
    offs_p = (pid // blocks_c) * BP + tl.arange(0, BP)  # destination pixels (n, i, j)
    offs_c = (pid % blocks_c) * BC + tl.arange(0, BC)
    inside = offs_p < N * HP * WP
    j = offs_p % WP
    i = (offs_p // WP) % HP
    n = offs_p // (WP * HP)
    di = i - LO_H
    dj = j - LO_W
    found = inside & (di >= 0) & (dj >= 0) & (di < H * DH) & (dj < W * DW)
    if DH > 1:
        found = found & (di % DH == 0)
    if DW > 1:
        found = found & (dj % DW == 0)
    si = tl.where(found, di // DH, 0)
    sj = tl.where(found, dj // DW, 0)
    channel_ok = offs_c < C
    value = tl.load(src + (((n * H + si) * W + sj) * C)[:, None] + offs_c[None, :],
                    mask=found[:, None] & channel_ok[None, :], other=0.0)
    tl.store(dst + DST_OFF + (offs_p * C)[:, None] + offs_c[None, :], value,
             mask=inside[:, None] & channel_ok[None, :])


# -- the strided data gradient by phase (dgrad.py) -------------------------------------------------


@triton.jit
def boo_hopper_dgrad_phases(dy, w, dx, DY_OFF: tl.constexpr, W_OFF: tl.constexpr, DX_OFF: tl.constexpr,
                            N: tl.constexpr, P: tl.constexpr, Q: tl.constexpr, K: tl.constexpr, C: tl.constexpr,
                            H: tl.constexpr, W: tl.constexpr, R: tl.constexpr, S: tl.constexpr, SH: tl.constexpr,
                            SW: tl.constexpr, PAD_H: tl.constexpr, PAD_W: tl.constexpr, ORDER: tl.constexpr,
                            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
    """The data gradient of a strided convolution, one phase of dX's pixels per program:
    ``dx[n, SH*i + a, SW*j + b, c] = sum over the phase's taps (r, s) = (rho_a + SH*u, rho_b
    + SW*v) and k of dy[n, i + q_a - u, j + q_b - v, k] * w[k, r, s, c]`` (``rho_a = (a +
    PAD_H) mod SH``, ``q_a = (a + PAD_H) div SH``; dy read as zero outside itself by masked
    loads), channels-last dy (N, P, Q, K) and dx (N, H, W, C), the filter (K, R, S, C) as
    stored, H and W multiples of the strides. No multiply-add of a zero: a phase runs only
    the taps it reads, and one that reads none writes zeros. Programs of a phase are
    consecutive, the phases in ``ORDER`` (4 bits each, phase ``a * SW + b``; the most taps
    first), their output tiles in groups of GROUP rows; float32 sums rounded once."""
    ROWS: tl.constexpr = H // SH  # each phase's pixels: ROWS x COLS per image
    COLS: tl.constexpr = W // SW
    M: tl.constexpr = N * ROWS * COLS
    tiles_m: tl.constexpr = (M + BM - 1) // BM
    tiles_n: tl.constexpr = C // BN
    per_phase: tl.constexpr = tiles_m * tiles_n
    blocks: tl.constexpr = K // BK
    pid = tl.program_id(0)
    phase = (ORDER >> (4 * (pid // per_phase))) & 15
    a = phase // SW
    b = phase % SW
    rho_a = (a + PAD_H) % SH
    rho_b = (b + PAD_W) % SW
    q_a = (a + PAD_H) // SH
    q_b = (b + PAD_W) // SW
    taps_b = (S - rho_b + SW - 1) // SW
    steps = (R - rho_a + SH - 1) // SH * taps_b * blocks
    pid_m, pid_n = grouped_tile(pid % per_phase, tiles_m, tiles_n, GROUP)
    offs_m = pid_m * BM + tl.arange(0, BM)
    pixel = tl.minimum(offs_m, M - 1)
    n = pixel // (ROWS * COLS)
    i = (pixel // COLS) % ROWS
    j = pixel % COLS
    offs_n = pid_n * BN + tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for t in range(steps):
        tap = t // blocks
        c0 = (t % blocks) * BK
        u = tap // taps_b
        v = tap % taps_b
        oh = i + q_a - u
        ow = j + q_b - v
        inside = (oh >= 0) & (oh < P) & (ow >= 0) & (ow < Q)
        g = tl.load(dy + DY_OFF + (((n * P + oh) * Q + ow) * K + c0)[:, None] + offs_k[None, :],
                    mask=inside[:, None], other=0.0)
        f = tl.load(w + W_OFF + (((c0 + offs_k[:, None]) * R + rho_a + SH * u) * S + rho_b + SW * v) * C
                    + offs_n[None, :])
        acc = tl.dot(g, f, acc)
    out = ((n * H + SH * i + a) * W + SW * j + b) * C
    tl.store(dx + DX_OFF + out[:, None] + offs_n[None, :], acc.to(tl.bfloat16), mask=(offs_m < M)[:, None])


# -- the weight gradient (wgrad.py) ---------------------------------------------------------------


@triton.jit
def boo_hopper_wgrad(a, b, part, DY_OFF: tl.constexpr, X_OFF: tl.constexpr, PART_OFF: tl.constexpr,
                     DY_IN_B: tl.constexpr, X_IN_B: tl.constexpr, M: tl.constexpr, K: tl.constexpr,
                     C: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, STEPS: tl.constexpr,
                     MASKED: tl.constexpr, R: tl.constexpr, S: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
                     P: tl.constexpr, Q: tl.constexpr, HP: tl.constexpr, WP: tl.constexpr,
                     GATHER: tl.constexpr, PAD_H: tl.constexpr, PAD_W: tl.constexpr):
    """One split of the weight gradient's reduction, float32: ``part[split, k, (r, s, c)] = sum
    over the split's pixels m = (n, p, q) of dy[m, k] * x[m, (r, s, c)]``. dy is (M, K),
    channels minor. With a 1x1 window over an image of M pixels (HP * WP = P * Q: the pixels
    the window reads) x is (M, C); otherwise x is a channels-last image (N, HP, WP, C) read
    through an R x S window at stride (SH, SW) over a P x Q output, its columns (r, s, c)
    never materialized: BN divides C (a tile's columns are one tap's channels), or, with
    ``GATHER`` (few channels: the 3-channel stem), each column is gathered on its own and
    columns past R*S*C are masked. The image holds its padding, or, with ``PAD_H``/``PAD_W``,
    is x itself, the windows reading zeros that many pixels around it by masked loads (with
    ``GATHER``, a mask per column's tap). Program ``pid`` is tile ``pid % tiles`` of split
    ``pid // tiles``: the programs of one split run together and read the same pixels (L2).
    Pixels past M read as zeros."""
    TC: tl.constexpr = R * S * C
    tiles_n: tl.constexpr = (TC + BN - 1) // BN
    tiles: tl.constexpr = (K // BM) * tiles_n
    PIXELS: tl.constexpr = R * S == 1 and HP * WP == P * Q  # x is (M, C): its rows are the pixels read
    pid = tl.program_id(0)
    split = pid // tiles
    tile = pid % tiles
    offs_k = (tile // tiles_n) * BM + tl.arange(0, BM)
    tile_n = tile % tiles_n
    offs_c = tile_n * BN + tl.arange(0, BN)  # the tile's (r, s, c) columns
    column_ok = offs_c < TC
    if PIXELS:
        offs_x = offs_c
    elif GATHER:  # each column's own offset from a window's corner: tap (r, s), channel c
        column = tl.minimum(offs_c, TC - 1)
        tap = column // C
        offs_x = ((tap // S) * WP + tap % S) * C + column % C
    else:  # one tap's channels: their offset from a window's corner in the image
        per_tap: tl.constexpr = C // BN
        tap = tile_n // per_tap
        offs_x = ((tap // S) * WP + tap % S) * C + (tile_n % per_tap) * BN + tl.arange(0, BN)
    PADS: tl.constexpr = PAD_H > 0 or PAD_W > 0  # x unpadded: the tile's tap reads zeros outside it
    if PADS:
        tap_r = tap // S
        tap_s = tap % S
    offs_p = tl.arange(0, BK)
    if DY_IN_B:
        dy = b + DY_OFF
    else:
        dy = a + DY_OFF
    if X_IN_B:
        x = b + X_OFF
    else:
        x = a + X_OFF
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    first = split * (STEPS * BK)
    for i in range(STEPS):
        pix = first + i * BK + offs_p
        if PIXELS:
            corner = pix * C
        else:
            inside = tl.minimum(pix, M - 1)
            top = (inside // Q) % P * SH - PAD_H
            left = inside % Q * SW - PAD_W
            corner = ((inside // (P * Q) * HP + top) * WP + left) * C
            if not GATHER:
                corner = tl.multiple_of(corner, 64)  # C is a multiple of 64: 16-byte loads along the channels
        if PADS:  # the tap inside the image: one per pixel, or (GATHER) each column's own
            if GATHER:  # columns past R*S*C masked too
                row = top[:, None] + tap_r[None, :]
                col = left[:, None] + tap_s[None, :]
                ok = (row >= 0) & (row < HP) & (col >= 0) & (col < WP) & column_ok[None, :]
            else:
                ok = ((top + tap_r >= 0) & (top + tap_r < HP) & (left + tap_s >= 0) & (left + tap_s < WP))[:, None]
            if MASKED:
                ok = ok & (pix < M)[:, None]
                g = tl.load(dy + pix[:, None] * K + offs_k[None, :], mask=(pix < M)[:, None], other=0.0)
            else:
                g = tl.load(dy + pix[:, None] * K + offs_k[None, :])
            v = tl.load(x + corner[:, None] + offs_x[None, :], mask=ok, other=0.0)
        elif GATHER:
            ok = (pix < M)[:, None]
            g = tl.load(dy + pix[:, None] * K + offs_k[None, :], mask=ok, other=0.0)
            v = tl.load(x + corner[:, None] + offs_x[None, :], mask=ok & column_ok[None, :], other=0.0)
        elif MASKED:
            ok = (pix < M)[:, None]
            g = tl.load(dy + pix[:, None] * K + offs_k[None, :], mask=ok, other=0.0)
            v = tl.load(x + corner[:, None] + offs_x[None, :], mask=ok, other=0.0)
        else:
            g = tl.load(dy + pix[:, None] * K + offs_k[None, :])
            v = tl.load(x + corner[:, None] + offs_x[None, :])
        acc = tl.dot(tl.trans(g), v, acc)
    tl.store(part + PART_OFF + split * (K * TC) + offs_k[:, None] * TC + offs_c[None, :], acc,
             mask=column_ok[None, :])


@triton.jit
def boo_hopper_sum(part, out, PART_OFF: tl.constexpr, OUT_OFF: tl.constexpr, NUMEL: tl.constexpr,
                   SPLITS: tl.constexpr, BLOCK: tl.constexpr):
    """``out[i] = bf16(sum over s < SPLITS of part[s, i])``: the split reduction's partial sums
    added in float32 and rounded once."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < NUMEL
    total = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in range(SPLITS):
        total += tl.load(part + PART_OFF + s * NUMEL + offs, mask=ok, other=0.0)
    tl.store(out + OUT_OFF + offs, total.to(tl.bfloat16), mask=ok)


@triton.jit
def boo_hopper_subsample(src, dst, DST_OFF: tl.constexpr, N: tl.constexpr, H: tl.constexpr, W: tl.constexpr,
                         C: tl.constexpr, P: tl.constexpr, Q: tl.constexpr, U: tl.constexpr, V: tl.constexpr,
                         BP: tl.constexpr, BC: tl.constexpr):
    """``dst[n, i, j, c] = src[n, i*U, j*V, c]``: the pixels a strided 1x1 window reads,
    channels-last in and out, over a whole ``(N, P, Q, C)`` destination."""
    blocks_c: tl.constexpr = (C + BC - 1) // BC
    pid = tl.program_id(0)
    offs_p = (pid // blocks_c) * BP + tl.arange(0, BP)
    offs_c = (pid % blocks_c) * BC + tl.arange(0, BC)
    inside = offs_p < N * P * Q
    j = offs_p % Q
    i = (offs_p // Q) % P
    n = offs_p // (Q * P)
    mask = inside[:, None] & (offs_c < C)[None, :]
    value = tl.load(src + (((n * H + i * U) * W + j * V) * C)[:, None] + offs_c[None, :], mask=mask, other=0.0)
    tl.store(dst + DST_OFF + (offs_p * C)[:, None] + offs_c[None, :], value, mask=mask)


@triton.jit
def boo_hopper_copy(src, dst, SRC_OFF: tl.constexpr, DST_OFF: tl.constexpr, START: tl.constexpr,
                    COUNT: tl.constexpr, BLOCK: tl.constexpr):
    """``dst[DST_OFF + i] = src[SRC_OFF + i]`` for ``START <= i < START + COUNT``: a flat copy,
    or one chunk of one."""
    offs = START + tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < START + COUNT
    tl.store(dst + DST_OFF + offs, tl.load(src + SRC_OFF + offs, mask=ok), mask=ok)
